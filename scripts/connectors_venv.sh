#!/usr/bin/env bash
# A venv for the KV connectors' tests, build/venv-connectors, with the real LMCache 0.5.6 and vLLM 0.33.0
# packages on this CPU-only machine. Both declare CUDA dependencies (cupy, nvidia-*, a CUDA torch) that the
# code paths the connectors use never import, so they are installed with --no-deps, next to the few
# packages those paths do import; torch comes from the shared torch venv and fjord from build/venv-sdk,
# through a .pth file (as scripts/python_sdk.sh does), so nothing large is installed twice. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv-connectors
[ -x build/venv-sdk/bin/python ] || { echo "connectors_venv.sh: run scripts/python_sdk.sh first" >&2; exit 1; }
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
printf '%s\n%s\n' "$(purelib build/venv-sdk/bin/python)" "$(purelib .venv-torch/bin/python)" \
    > "$(purelib "$venv/bin/python")/fjord-sdk-and-torch.pth"
pip=("$venv/bin/pip" --disable-pip-version-check -q)
"${pip[@]}" install --no-deps -r python/requirements-connectors.txt
# What LMCache's connector, config and CPU backend modules import (numba: its CPU kernels;
# transformers: the serde and adapter modules its connector discovery loads), and vLLM's kv_offload.
"${pip[@]}" install -r python/requirements-connectors-deps.txt 2>&1 | grep -v "dependency resolver\|requires\|incompatible" || true
"$venv/bin/python" -c 'import lmcache.v1.storage_backend.connector, vllm.v1.kv_offload.tiering.base, fjord.kv; print("connectors_venv.sh: lmcache and vllm importable in", "'"$venv"'")' 2>&1 | grep -v " INFO "
