#!/usr/bin/env bash
# What the block device does during a PUT phase: starts a fresh `fjord serve` (extra options from the
# command line), warms it up for 3 s, then runs `fjord bench s3 --op put` (BENCH_SIZE, default 64 MiB, x 8
# over 16 keys, so most PUTs replace an object) for BENCH_DURATION seconds and prints the /proc/diskstats
# deltas of the device that holds BENCH_DIR: bytes written, average write, discards, flushes, busy time
# and the mean number of requests in flight.
#   bench/put_diskstats.sh                       # defaults
#   bench/put_diskstats.sh --spare-data-mib 0    # freed data files removed at once
set -euo pipefail
cd "$(dirname "$0")/.."
FJORD=${FJORD_BINARY:-build/release/fjord}
WORK=${BENCH_DIR:-build/bench}
DURATION=${BENCH_DURATION:-10}
DATA="$WORK/diskstats-data"
rm -rf "$DATA" && mkdir -p "$DATA"
export FJORD_ACCESS_KEY=fjordbench FJORD_SECRET_KEY=fjordbench-secret-key
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ENDPOINT="http://127.0.0.1:$PORT"
"$FJORD" serve --data "$DATA" --listen "127.0.0.1:$PORT" "$@" >"$WORK/diskstats-server.log" 2>&1 &
SERVER_PID=$!
trap 'kill -TERM $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null; rm -rf "$DATA"' EXIT
for _ in $(seq 200); do curl -sf -o /dev/null "$ENDPOINT/health/ready" && break; sleep 0.1; done
# The device under the data directory (a partition's stats are its own line in /proc/diskstats).
DEV=$(lsblk -no KNAME "$(df --output=source "$DATA" | tail -1)" 2>/dev/null | head -1)
[[ -n "$DEV" ]] || { echo "cannot find the block device of $DATA" >&2; exit 1; }
S3=(--endpoint "$ENDPOINT" --bucket bench --op put --unique-bodies --size "${BENCH_SIZE:-64MiB}" --concurrency 8 --objects 16)
"$FJORD" bench s3 "${S3[@]}" --duration 3 >/dev/null
before=$(awk -v d="$DEV" '$3 == d' /proc/diskstats)
"$FJORD" bench s3 "${S3[@]}" --duration "$DURATION" --server-pid "$SERVER_PID" | grep -E "total|cpu"
after=$(awk -v d="$DEV" '$3 == d' /proc/diskstats)
python3 - "$before" "$after" "$DEV" <<'PY'
import sys
a, b = (list(map(int, x.split()[3:])) for x in sys.argv[1:3])
d = [y - x for x, y in zip(a, b)]
# fields after the name: reads, merged, sectors, ms, writes, merged, sectors, ms, in flight, io ms,
# weighted ms, discards, merged, sectors, ms, flushes, flush ms
print(f"{sys.argv[3]}: written {d[6] * 512 / 2**30:.2f} GiB in {d[4]} writes (avg {d[6] * 512 / max(d[4], 1) / 1024:.0f} KiB), "
      f"discarded {d[13] * 512 / 2**30:.2f} GiB ({d[14]} ms), flushes {d[15]} ({d[16]} ms), busy {d[9]} ms, "
      f"mean requests in flight while busy {d[10] / max(d[9], 1):.1f}")
PY
