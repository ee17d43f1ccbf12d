#!/usr/bin/env bash
# HTTPS against plain HTTP in one run (docs/benchmarks.md, "TLS"): PUT and GET of 64 MiB objects, 8 at a
# time, through `fjord bench s3`, first against `fjord serve` over plain HTTP, then against the same
# binary and data directory with --tls-cert (a certificate made here by a throwaway CA), and the ratio
# of each HTTPS figure to the HTTP one. kTLS (the kernel encrypting) needs the kernel's "tls" upper-layer
# protocol: the script says whether this kernel offers it (/proc/sys/net/ipv4/tcp_available_ulp).
# Knobs (environment): FJORD_BINARY (build/release/fjord), BENCH_DIR (build/bench-tls), BENCH_DURATION
# (10 s per phase), BENCH_CORES (2, server and client each).
set -euo pipefail
cd "$(dirname "$0")/.."
FJORD=${FJORD_BINARY:-build/release/fjord}
WORK=${BENCH_DIR:-build/bench-tls}
DURATION=${BENCH_DURATION:-10}
CORES=${BENCH_CORES:-2}
[[ -x "$FJORD" ]] || { echo "bench/tls.sh: $FJORD not found (run make build)" >&2; exit 1; }
DATA="$WORK/data" RESULTS="$WORK/results" CERTS="$WORK/certs"
rm -rf "$DATA" "$RESULTS" "$CERTS"
mkdir -p "$DATA" "$RESULTS" "$CERTS"
export FJORD_ACCESS_KEY=fjordbench FJORD_SECRET_KEY=fjordbench-secret-key
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
SERVER_PID=
stop_server() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true
    fi
    SERVER_PID=
}
trap 'stop_server; rm -rf "$DATA"' EXIT
trap 'exit 130' INT TERM
start_server() {  # start_server SCHEME [serve options]
    local scheme=$1; shift
    "$FJORD" serve --data "$DATA" --listen "127.0.0.1:$PORT" --cores "$CORES" "$@" >>"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 200); do
        curl -sf --cacert "$CERTS/ca.pem" -o /dev/null "$scheme://127.0.0.1:$PORT/health/ready" && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || { tail -20 "$WORK/server.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "fjord serve not ready" >&2; exit 1
}

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$CERTS/ca.key" \
    -out "$CERTS/ca.pem" -days 2 -subj "/CN=Fjord bench CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$CERTS/server.key" \
    -out "$CERTS/server.csr" -subj "/CN=127.0.0.1" 2>/dev/null
echo "subjectAltName=IP:127.0.0.1" > "$CERTS/ext.cnf"
openssl x509 -req -in "$CERTS/server.csr" -CA "$CERTS/ca.pem" -CAkey "$CERTS/ca.key" -CAcreateserial \
    -out "$CERTS/server.pem" -days 2 -extfile "$CERTS/ext.cnf" 2>/dev/null

run_pair() {  # run_pair NAME ENDPOINT [bench options]
    local name=$1 endpoint=$2; shift 2
    for op in put get; do
        "$FJORD" bench s3 --endpoint "$endpoint" --bucket tlsbench --op "$op" --size 64MiB --concurrency 8 \
            --duration "$DURATION" --cores "$CORES" --server-pid "$SERVER_PID" "$@" \
            --json "$RESULTS/$name-$op.json"
    done
}
echo "== plain HTTP"
start_server http
run_pair http "http://127.0.0.1:$PORT"
stop_server
echo "== HTTPS (userspace TLS, OpenSSL)"
start_server https --tls-cert "$CERTS/server.pem" --tls-key "$CERTS/server.key"
run_pair https "https://127.0.0.1:$PORT" --ca-cert "$CERTS/ca.pem"
cipher=$(openssl s_client -connect "127.0.0.1:$PORT" -CAfile "$CERTS/ca.pem" </dev/null 2>/dev/null |
    grep -m1 'Cipher is' || true)
stop_server

python3 - "$RESULTS" "$cipher" <<'PY'
import json, sys, pathlib
results = pathlib.Path(sys.argv[1])
def load(name):
    r = json.loads((results / f"{name}.json").read_text())
    if r["errors"]:
        sys.exit(f"bench/tls.sh: {name}: {r['errors']} errors, first: {r['first_error']}")
    gib = r["bytes"] / 2**30
    return r["throughput_gib_s"], r["server_cpu_s"] / gib, r["client_cpu_s"] / gib
print(f"\n== HTTPS against plain HTTP, same run (64 MiB objects, 8 at a time); {sys.argv[2].strip()}")
print(f"{'op':4} {'http GiB/s':>10} {'https GiB/s':>11} {'ratio':>6}   "
      f"{'server cpu s/GiB http':>21} {'https':>6}   {'client cpu s/GiB http':>21} {'https':>6}")
for op in ("put", "get"):
    h, t = load(f"http-{op}"), load(f"https-{op}")
    print(f"{op:4} {h[0]:10.3f} {t[0]:11.3f} {t[0] / h[0]:6.2f}   {h[1]:21.2f} {t[1]:6.2f}   "
          f"{h[2]:21.2f} {t[2]:6.2f}")
PY
ulp=$(cat /proc/sys/net/ipv4/tcp_available_ulp 2>/dev/null || echo "?")
if [[ " $ulp " == *" tls "* ]]; then
    echo "kTLS: the kernel offers it (tcp_available_ulp: $ulp); fjord does not use it yet"
else
    echo "kTLS: not offered by this kernel (tcp_available_ulp: $ulp): not measured"
fi
