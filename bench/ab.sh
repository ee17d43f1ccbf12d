#!/usr/bin/env bash
# Two server builds side by side on the same disk, alternating A B B A (ROUNDS times), each on a fresh
# data directory with 2 cores: the server CPU per 4 KiB PUT and GET (32 connections), and 64 MiB PUTs (8
# connections) as a fraction of the raw O_DIRECT disk write measured just before, in the same round.
# For a change that should cost nothing (docs/benchmarks.md, "The request router: before and after").
# The client is build/release/fjord for both. Prints one line per run and the means.
# Usage: bench/ab.sh A_FJORD B_FJORD [ROUNDS]   (AB_DURATION: seconds per phase, default 8)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { echo "usage: bench/ab.sh A_FJORD B_FJORD [ROUNDS]" >&2; exit 2; }
A=$1 B=$2 ROUNDS=${3:-2} DURATION=${AB_DURATION:-8}
CLIENT=build/release/fjord
WORK=$(mktemp -d "$PWD/build/ab.XXXXXX")  # under build/: the disk the project lives on
export FJORD_ACCESS_KEY=fjordbench FJORD_SECRET_KEY=fjordbench-secret-key
PID=
stop() {
    if [[ -n "$PID" ]] && kill -0 "$PID" 2>/dev/null; then kill -TERM "$PID"; wait "$PID" || true; fi
    PID=
}
trap 'stop; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

run() {  # run LABEL BINARY
    local label=$1 bin=$2 port out
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    out="$WORK/$label.$RANDOM"
    rm -rf "$WORK/data" && mkdir -p "$WORK/data" "$out"
    "$CLIENT" bench disk --dir "$WORK/data" --size-mib 1024 --depth 8 --block-kib 1024 --passes 1 \
        --json "$out/disk.json" >/dev/null
    "$bin" serve --data "$WORK/data" --listen "127.0.0.1:$port" --cores 2 >"$out/server.log" 2>&1 &
    PID=$!
    for _ in $(seq 200); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/health/ready" && break
        sleep 0.1
    done
    local common=(--endpoint "http://127.0.0.1:$port" --bucket ab-bench --duration "$DURATION" --server-pid "$PID")
    "$CLIENT" bench s3 --op put --size 4KiB --concurrency 32 --unique-bodies "${common[@]}" \
        --json "$out/put4k.json" >/dev/null
    "$CLIENT" bench s3 --op get --size 4KiB --concurrency 32 "${common[@]}" --json "$out/get4k.json" >/dev/null
    "$CLIENT" bench s3 --op put --size 64MiB --concurrency 8 --unique-bodies "${common[@]}" \
        --json "$out/put64m.json" >/dev/null
    stop
    python3 - "$label" "$out" <<'PY'
import json, sys, pathlib
label, out = sys.argv[1], pathlib.Path(sys.argv[2])
j = lambda name: json.loads((out / name).read_text())
disk = j("disk.json")
write = disk["write_gib_s"]
cpu = lambda r: 1e6 * r["server_cpu_s"] / max(r["operations"], 1)
p4, g4, p64 = j("put4k.json"), j("get4k.json"), j("put64m.json")
print(f"{label} put4k_us={cpu(p4):.1f} get4k_us={cpu(g4):.1f} put64m_gib_s={p64['throughput_gib_s']:.3f} "
      f"disk_write_gib_s={write:.3f} ratio={p64['throughput_gib_s'] / write:.3f}", flush=True)
PY
}

for ((i = 0; i < ROUNDS; i++)); do
    run A "$A" | tee -a "$WORK/lines"
    run B "$B" | tee -a "$WORK/lines"
    run B "$B" | tee -a "$WORK/lines"
    run A "$A" | tee -a "$WORK/lines"
done
python3 - "$WORK/lines" <<'PY'
import sys, statistics, collections
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    label, *fields = line.split()
    for f in fields:
        k, v = f.split("=")
        runs[label][k].append(float(v))
for label in sorted(runs):
    print(label, "mean", " ".join(f"{k}={statistics.mean(v):.3f}" for k, v in runs[label].items()))
PY
