#!/usr/bin/env bash
# Builds the Python package (python/) and installs it into a fresh venv, build/venv-sdk, with pip: the
# same `pip install ./python` a user runs. The package's tests need torch, which lives in the shared torch
# venv (.venv-torch, several GB, made by scripts/bootstrap.sh): a .pth file puts that venv's
# site-packages after build/venv-sdk's own, so build/venv-sdk has fjord (and the test-only packages
# below) and sees torch, numpy, fsspec and pytest without installing them twice. Rebuilds reuse
# build/python/ (pyproject.toml's build-dir), so a second run only compiles what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv-sdk
[ -x .venv-torch/bin/python ] || { echo "python_sdk.sh: .venv-torch missing: run scripts/bootstrap.sh" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
fi
torch_site=$(.venv-torch/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
sdk_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$torch_site" > "$sdk_site/fjord-torch-venv.pth"
# Only for comparisons in the tests: the safetensors package reads what fjord.torch.save_safetensors writes.
"$venv/bin/pip" install -q -r python/requirements-test.txt
"$venv/bin/pip" install -q ./python
"$venv/bin/python" -c 'import fjord, fjord.torch, fjord.fsspec; print("python_sdk.sh: fjord", fjord.__version__, "installed in build/venv-sdk")'
