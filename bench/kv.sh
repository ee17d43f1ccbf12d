#!/usr/bin/env bash
# The KV tier against the physical limits of this machine, in one run (docs/kv.md; docs/benchmarks.md):
#   1. raw O_DIRECT disk read of 2 MiB blocks (`fjord bench disk`) and loopback TCP (`fjord bench net`)
#   2. server CPU per 4 KiB S3 GET and PUT on an object bucket and on a KV bucket (32 connections)
#   3. a fresh `fjord serve` with a 2 GiB DRAM tier: batch get of 2 MiB blocks from DRAM, one block per
#      request, 16 requests at once (and plain S3 for comparison); batch exists of 1,000 keys, one at a time;
#      64 KiB blocks in batches of 64, batch API against plain S3 (one GET per block)
#   4. the same server restarted with no DRAM tier (--kv-dram-mib 0): batch get of 2 MiB blocks from NVMe
#   5. the MLPerf-style KV-cache workload (llama3.1-8b, scaled), batch API and plain S3, BENCH_USERS users;
#      and the batch API with 2 users
# and a table of each figure against its limit or target. Knobs (environment): FJORD_BINARY
# (build/release/fjord), BENCH_DIR (build/bench-kv; on the file system to measure), BENCH_DURATION (10 s per
# phase), BENCH_USERS (8, the workload), BENCH_CORES (2, server and client each).
set -euo pipefail
cd "$(dirname "$0")/.."
FJORD=${FJORD_BINARY:-build/release/fjord}
WORK=${BENCH_DIR:-build/bench-kv}
DURATION=${BENCH_DURATION:-10}
USERS=${BENCH_USERS:-8}
CORES=${BENCH_CORES:-2}
[[ -x "$FJORD" ]] || { echo "bench/kv.sh: $FJORD not found (run make build)" >&2; exit 1; }
DATA="$WORK/data" RESULTS="$WORK/results"
rm -rf "$DATA" "$RESULTS"
mkdir -p "$DATA" "$RESULTS"
export FJORD_ACCESS_KEY=fjordbench FJORD_SECRET_KEY=fjordbench-secret-key
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ENDPOINT="http://127.0.0.1:$PORT"
SERVER_PID=
stop_server() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true
    fi
    SERVER_PID=
}
trap 'stop_server; rm -rf "$DATA"' EXIT
trap 'exit 130' INT TERM
start_server() {
    "$FJORD" serve --data "$DATA" --listen "127.0.0.1:$PORT" --cores "$CORES" "$@" >>"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 200); do
        curl -sf -o /dev/null "$ENDPOINT/health/ready" && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || { tail -20 "$WORK/server.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "fjord serve not ready" >&2; exit 1
}
KV=("$FJORD" bench kv --endpoint "$ENDPOINT" --cores "$CORES" --duration "$DURATION")

echo "== limits"
"$FJORD" bench disk --dir "$DATA" --size-mib 1024 --depth 16 --block-kib 2048 --passes 2 --json "$RESULTS/disk.json"
"$FJORD" bench net --seconds 3 --streams 1 --json "$RESULTS/net.json"
start_server --kv-dram-mib 2048
echo "== server CPU per 4 KiB S3 request (object bucket, 32 connections)"
S3=("$FJORD" bench s3 --endpoint "$ENDPOINT" --bucket small --size 4KiB --concurrency 32 --duration "$DURATION"
    --cores "$CORES" --server-pid "$SERVER_PID")
"${S3[@]}" --op get --json "$RESULTS/s3-get-4k.json"
"${S3[@]}" --op put --json "$RESULTS/s3-put-4k.json"
echo "== server CPU per 4 KiB S3 request (KV bucket, 32 connections)"
"$FJORD" mb --kv s3://kvsmall --capacity 2GiB --endpoint "$ENDPOINT"
S3[6]=kvsmall
"${S3[@]}" --op get --json "$RESULTS/kv-s3-get-4k.json"
"${S3[@]}" --op put --json "$RESULTS/kv-s3-put-4k.json"
echo "== 2 MiB blocks from DRAM"
"${KV[@]}" --server-pid "$SERVER_PID" --bucket kv2m --capacity 8GiB --op get --block 2MiB --batch 1 \
    --concurrency 16 --objects 512 --json "$RESULTS/kv-get-2m-dram.json"
echo "== batch exists of 1,000 keys"
"${KV[@]}" --server-pid "$SERVER_PID" --bucket kv2m --op exists --batch 1000 --concurrency 1 --objects 512 \
    --mode batch --json "$RESULTS/kv-exists-1000.json"
echo "== 64 KiB blocks"
"${KV[@]}" --server-pid "$SERVER_PID" --bucket kv64k --capacity 4GiB --op get --block 64KiB --batch 64 \
    --concurrency 8 --objects 4096 --json "$RESULTS/kv-get-64k.json"
"${KV[@]}" --server-pid "$SERVER_PID" --bucket kv64kput --capacity 4GiB --op put --block 64KiB --batch 64 \
    --concurrency 8 --json "$RESULTS/kv-put-64k.json"
stop_server
echo "== 2 MiB blocks from NVMe (no DRAM tier)"
start_server --kv-dram-mib 0
"${KV[@]}" --server-pid "$SERVER_PID" --bucket kv2m --op get --block 2MiB --batch 1 --concurrency 16 \
    --objects 512 --mode batch --json "$RESULTS/kv-get-2m-nvme.json"
stop_server
echo "== the KV-cache workload"
start_server --kv-dram-mib 512
"${KV[@]}" --server-pid "$SERVER_PID" --bucket kvwork --capacity 8GiB --op workload --users "$USERS" \
    --json "$RESULTS/kv-workload.json" --report "$RESULTS/kv-workload"
"${KV[@]}" --server-pid "$SERVER_PID" --bucket kvwork2 --capacity 8GiB --op workload --users 2 --mode batch \
    --json "$RESULTS/kv-workload-2users.json"
stop_server

python3 - "$RESULTS" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
j = lambda n: json.loads((d / f"{n}.json").read_text())
disk, net = j("disk"), j("net")
def op(res, mode, name):
    m = next(m for m in res["modes"] if m["mode"] == mode)
    o = next(o for o in m["ops"] if o["op"] == name)
    return m, o
def gib_s(m, o):
    return o["bytes"] / m["seconds"] / 2**30
def per_block_us(m, o):
    return m["server_cpu_s"] * 1e6 / o["blocks"] if o["blocks"] else float("nan")
rows = []
for name in ("s3-get-4k", "s3-put-4k", "kv-s3-get-4k", "kv-s3-put-4k"):
    r = j(name)
    us = r["server_cpu_s"] * 1e6 / r["operations"]
    target = 40 if "get" in name else 120
    where = "KV bucket" if name.startswith("kv") else "object bucket"
    rows.append((f"server CPU per 4 KiB S3 {'GET' if 'get' in name else 'PUT'} ({where})", f"{us:.0f} us",
                 f"target {target} us", f"{r['operations'] / r['seconds']:.0f} ops/s"))
m, o = op(j("kv-get-2m-dram"), "batch", "get")
rows.append(("batch get 2 MiB from DRAM, 16 at once", f"{gib_s(m, o):.2f} GiB/s, p99 {o['p99_ms']:.1f} ms",
             f"loopback {net['gib_s']:.2f} GiB/s: {gib_s(m, o) / net['gib_s']:.2f}", f"{per_block_us(m, o):.0f} us CPU/block"))
m2, o2 = op(j("kv-get-2m-dram"), "s3", "get")
rows.append(("  plain S3 GET, same", f"{gib_s(m2, o2):.2f} GiB/s, p99 {o2['p99_ms']:.1f} ms", "", ""))
m, o = op(j("kv-get-2m-nvme"), "batch", "get")
rows.append(("batch get 2 MiB from NVMe, 16 at once", f"{gib_s(m, o):.2f} GiB/s, p99 {o['p99_ms']:.1f} ms",
             f"disk read {disk['read_gib_s']:.2f} GiB/s: {gib_s(m, o) / disk['read_gib_s']:.2f}", ""))
m, o = op(j("kv-exists-1000"), "batch", "exists")
rows.append(("batch exists of 1,000 keys", f"p50 {o['p50_ms']:.2f} ms, p99 {o['p99_ms']:.2f} ms", "target p99 < 1 ms", ""))
for name in ("kv-get-64k", "kv-put-64k"):
    what = "get" if "get" in name else "put"
    mb, ob = op(j(name), "batch", what)
    ms, os_ = op(j(name), "s3", what)
    rb, rs = ob["blocks"] / mb["seconds"], os_["blocks"] / ms["seconds"]
    rows.append((f"64 KiB blocks, {what}: batch / plain S3", f"{rb:.0f} / {rs:.0f} blocks/s", f"{rb / rs:.1f}x (target 3x)",
                 f"{per_block_us(mb, ob):.0f} / {per_block_us(ms, os_):.0f} us CPU/block"))
for m in j("kv-workload")["modes"] + [dict(j("kv-workload-2users")["modes"][0], mode="batch, 2 users")]:
    ops = {o["op"]: o for o in m["ops"]}
    hit = m["hit_tokens"] / m["context_tokens"] if m["context_tokens"] else 0
    rows.append((f"workload ({m['mode']})", f"hit {hit:.0%}, {m['context_tokens'] / m['seconds']:.0f} tokens/s",
                 f"read P95 {ops.get('get', {}).get('p95_ms', 0):.0f} ms, write P95 {ops.get('put', {}).get('p95_ms', 0):.0f} ms", ""))
print("| figure | measured | against | note |\n|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
PY
