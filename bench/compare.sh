#!/usr/bin/env bash
# Fjord against another S3 endpoint, in one run on one machine: the same suite, run first against a fresh
# local `fjord serve` (started here) and then against the endpoint given, and one table side by side.
#
#   bench/compare.sh URL [ACCESS_KEY SECRET_KEY]
#
# The suite: `fjord bench s3` PUT then GET of 64 MiB objects with 8 concurrent clients (COMPARE_DURATION
# seconds each), and `fjord bench checkpoint` (llama3-8b at scale 1/32, 8 ranks, 3 checkpoints, no
# compute gap). Both sides are driven by the same native client. The other endpoint's keys default to
# FJORD_ACCESS_KEY / FJORD_SECRET_KEY (else fjordadmin / fjordadmin-secret); its buckets fjord-compare
# and fjord-compare-ckpt are created, and emptied and removed at the end.
#
# Knobs (environment): FJORD_BINARY (build/release/fjord), COMPARE_DIR (build/compare: data, logs,
# reports), COMPARE_SIZE (64MiB), COMPARE_CONCURRENCY (8), COMPARE_DURATION (5), COMPARE_CHECKPOINTS (3),
# COMPARE_SCALE (1/32), COMPARE_CLIENT_CORES (2), COMPARE_SERVER_CORES (all).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -ne 1 && $# -ne 3 ]]; then
    echo "usage: bench/compare.sh URL [ACCESS_KEY SECRET_KEY]" >&2
    exit 2
fi
OTHER_URL=$1
OTHER_ACCESS=${2:-${FJORD_ACCESS_KEY:-fjordadmin}}
OTHER_SECRET=${3:-${FJORD_SECRET_KEY:-fjordadmin-secret}}
FJORD=${FJORD_BINARY:-build/release/fjord}
WORK=${COMPARE_DIR:-build/compare}
SIZE=${COMPARE_SIZE:-64MiB}
CONCURRENCY=${COMPARE_CONCURRENCY:-8}
DURATION=${COMPARE_DURATION:-5}
CHECKPOINTS=${COMPARE_CHECKPOINTS:-3}
SCALE=${COMPARE_SCALE:-1/32}
CLIENT_CORES=${COMPARE_CLIENT_CORES:-2}
SERVER_CORES=${COMPARE_SERVER_CORES:-$(nproc)}
BUCKET=fjord-compare

[[ -x "$FJORD" ]] || { echo "bench/compare.sh: $FJORD not found (run make build)" >&2; exit 1; }
rm -rf "$WORK"
mkdir -p "$WORK/data" "$WORK/fjord" "$WORK/other"
FJORD_KEYS=(fjordcompare fjordcompare-secret-key)

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
FJORD_URL="http://127.0.0.1:$PORT"
SERVER_PID=
stop_server() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"
        wait "$SERVER_PID" || true
    fi
    SERVER_PID=
}
trap stop_server EXIT
trap 'exit 130' INT TERM

FJORD_ACCESS_KEY=${FJORD_KEYS[0]} FJORD_SECRET_KEY=${FJORD_KEYS[1]} \
    "$FJORD" serve --data "$WORK/data" --listen "127.0.0.1:$PORT" --cores "$SERVER_CORES" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 200); do  # up to 20 s
    curl -sf -o /dev/null "$FJORD_URL/health/ready" && break
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "fjord serve exited; log:" >&2; tail -20 "$WORK/server.log" >&2; exit 1; }
    sleep 0.1
done
curl -sf -o /dev/null "$FJORD_URL/health/ready" || { echo "fjord serve not ready after 20 s" >&2; exit 1; }

# suite NAME URL ACCESS SECRET: the S3 PUT and GET phases and the checkpoint workload, reports in $WORK/NAME.
suite() {
    local name=$1 url=$2 out="$WORK/$1"
    export FJORD_ACCESS_KEY=$3 FJORD_SECRET_KEY=$4
    local s3=(--endpoint "$url" --bucket "$BUCKET" --size "$SIZE" --concurrency "$CONCURRENCY" --duration "$DURATION"
              --cores "$CLIENT_CORES")
    echo "== $name ($url): s3 put"
    "$FJORD" bench s3 --op put "${s3[@]}" --report "$out/put"
    echo "== $name: s3 get"
    "$FJORD" bench s3 --op get "${s3[@]}" --report "$out/get"
    echo "== $name: checkpoint"
    "$FJORD" bench checkpoint --endpoint "$url" --bucket "$BUCKET-ckpt" --scale "$SCALE" --checkpoints "$CHECKPOINTS" \
        --compute-seconds 0 --cores "$CLIENT_CORES" --report "$out/checkpoint" | tail -4
}
suite fjord "$FJORD_URL" "${FJORD_KEYS[@]}"
stop_server
suite other "$OTHER_URL" "$OTHER_ACCESS" "$OTHER_SECRET"
echo "== cleaning up the other endpoint's buckets"
for b in "$BUCKET" "$BUCKET-ckpt"; do
    "$FJORD" rm --recursive "s3://$b" --endpoint "$OTHER_URL" >/dev/null && "$FJORD" rb "s3://$b" --endpoint "$OTHER_URL" || true
done
[[ -n "${COMPARE_KEEP_DATA:-}" ]] || rm -rf "$WORK/data"

python3 - "$WORK" "$OTHER_URL" <<'PY'
import json, sys, pathlib
work, other_url = pathlib.Path(sys.argv[1]), sys.argv[2]
def load(side, phase):
    return json.loads((work / side / phase / "results.json").read_text())
sides = {s: {p: load(s, p) for p in ("put", "get", "checkpoint")} for s in ("fjord", "other")}
put = sides["fjord"]["put"]
ck = sides["fjord"]["checkpoint"]
rows = []
for op in ("put", "get"):
    label = f"S3 {op.upper()} {put['size_bytes'] >> 20} MiB x{put['concurrency']}"
    rows.append((f"{label} GiB/s", lambda s, op=op: s[op]["throughput_gib_s"], True))
    rows.append((f"{label} p50 ms", lambda s, op=op: s[op]["latency_ms"]["p50"], False))
    rows.append((f"{label} p99 ms", lambda s, op=op: s[op]["latency_ms"]["p99"], False))
    rows.append((f"{label} errors", lambda s, op=op: s[op]["errors"], False))
for phase in ("write", "read"):
    rows.append((f"ckpt 1/{ck['scale']} x{ck['ranks']} {phase} GiB/s", lambda s, p=phase: s["checkpoint"][p]["mean_gib_s"], True))
print()
print(f"{'measure':36} {'fjord':>10} {'other':>10} {'fjord/other':>12}")
table = []
for name, get, higher_is_better in rows:
    f, o = get(sides["fjord"]), get(sides["other"])
    ratio = f / o if o else None
    print(f"{name:36} {f:10.3f} {o:10.3f} {'' if o == 0 else f'{ratio:12.2f}':>12}")
    table.append({"measure": name, "fjord": f, "other": o, "ratio": ratio, "higher_is_better": higher_is_better})
(work / "compare.json").write_text(json.dumps({"other_endpoint": other_url, "rows": table}, indent=2) + "\n")
print(f"\nother endpoint: {other_url}; reports: {work}/fjord/*/ and {work}/other/*/ (report.md, chart.svg)")
PY
