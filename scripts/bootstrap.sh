#!/usr/bin/env bash
# Installs everything Fjord needs to build and test on a fresh Debian 12 machine.
# Idempotent: a second run checks and returns quickly. Runs as root (apt-get) or via sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=(
    build-essential cmake ninja-build pkg-config
    liburing-dev libisal-dev libssl-dev libpugixml-dev nlohmann-json3-dev libgtest-dev googletest
    clang-14 libclang-rt-14-dev
    rclone s3cmd curl openssl
    etcd-server etcd-client
    python3-dev python3-venv
)

need_apt=()
for p in "${debian_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "bootstrap: installing Debian packages: ${need_apt[*]}"
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

# Python test clients live in project venvs. The aws CLI (v1, from PyPI) pins its own botocore, so it gets
# a venv of its own and boto3/botocore in the main venv stay at their latest releases.
stamp_of() { sha256sum "$1" | cut -c1-16; }
make_venv() {  # make_venv DIR REQUIREMENTS [PIP INSTALL OPTIONS...]
    local dir=$1 req=$2 stamp
    shift 2
    stamp=$(stamp_of "$req")
    if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$stamp" ]; then return; fi
    echo "bootstrap: creating $dir from $req"
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q --upgrade pip
    "$dir/bin/pip" install -q --upgrade "$@" -r "$req" \
        || { echo "bootstrap: pip could not install $req into $dir" >&2; exit 1; }
    echo "$stamp" > "$dir/.stamp"
}
make_venv .venv tests/integration/requirements.txt
make_venv .venv-awscli tests/integration/requirements-awscli.txt
make_venv .venv-style scripts/requirements-style.txt

# s3torchconnector needs torch, and torch from PyPI brings the CUDA wheels (about 5.5 GB installed). That venv
# lives in a per-user cache outside the repository, named by the hash of its fully pinned requirements, so
# every clone on the machine shares it and only a change of that file installs again (no pip cache: the
# venv is the cache). The repository gets the link .venv-torch.
torch_req=tests/integration/requirements-torch.txt
torch_venv="${XDG_CACHE_HOME:-$HOME/.cache}/fjord/venv-torch-$(stamp_of "$torch_req")"
if [ ! -f "$torch_venv/.stamp" ]; then
    echo "bootstrap: installing torch + s3torchconnector into $torch_venv (several GB, once per machine)"
    mkdir -p "$(dirname "$torch_venv")"
fi
make_venv "$torch_venv" "$torch_req" --no-cache-dir
ln -sfn "$torch_venv" .venv-torch
