#!/usr/bin/env bash
# What the block device sees while a command runs: traces the block layer's request issue, requeue and
# completion events (a private tracefs instance, as blktrace would; needs root) on the disk that holds
# BENCH_DIR, for TRACE_SECONDS (default 4) starting TRACE_DELAY seconds (default 5: past the warm-up of
# put_diskstats.sh) after the command started, then prints request sizes, requeues (a request handed back
# because the device had no room for it), requests in flight (a requeued one counts again only when
# issued again), the share of time the device had nothing to do, latencies and flushes. Also prints the
# queue limits that decide how much the device can hold (max_segments, and for virtio whether it has
# indirect descriptors). Make sure the command is still in the phase you want for the whole window.
#   bench/block_trace.sh build/release/fjord bench disk --dir build/bench/d --size-mib 16384 --files 8 --depth 8
#   bench/block_trace.sh bench/put_diskstats.sh
#   bench/block_trace.sh bench/put_diskstats.sh --no-huge-pages
# Tracing costs CPU: throughput under trace is lower than without; compare traced runs with each other.
set -euo pipefail
cd "$(dirname "$0")/.."
(( $# > 0 )) || { echo "usage: bench/block_trace.sh COMMAND [ARGS...]" >&2; exit 2; }
WORK=${BENCH_DIR:-build/bench}
SECONDS_TRACED=${TRACE_SECONDS:-4}
DELAY=${TRACE_DELAY:-5}
TRACEFS=/sys/kernel/tracing
[[ -d $TRACEFS/events/block ]] || mount -t tracefs nodev $TRACEFS 2>/dev/null || true
[[ -d $TRACEFS/instances && -d $TRACEFS/events/block ]] || { echo "block_trace.sh: needs root and tracefs at $TRACEFS" >&2; exit 1; }
mkdir -p "$WORK"
# The whole disk under the data directory's file system (requests of a partition or a device-mapper
# volume are issued on the disks below it).
SOURCE=$(df --output=source "$WORK" 2>/dev/null | tail -1 || true)
DISK=$(lsblk -s -no KNAME,TYPE "$SOURCE" 2>/dev/null | awk '$2 == "disk" { print $1; exit }' || true)
[[ -n "$DISK" && -r /sys/block/$DISK/dev ]] || { echo "block_trace.sh: cannot find the disk under $WORK ($SOURCE)" >&2; exit 1; }
read -r MAJ MIN < <(tr ':' ' ' <"/sys/block/$DISK/dev")
Q=/sys/block/$DISK/queue
echo "device $DISK ($MAJ:$MIN): max_segments $(cat $Q/max_segments), max_sectors_kb $(cat $Q/max_sectors_kb)," \
     "nr_requests $(cat $Q/nr_requests), scheduler $(cat $Q/scheduler)"
FEATURES=$(cat "/sys/block/$DISK/device/features" 2>/dev/null || true)
if [[ -n "$FEATURES" ]]; then  # virtio: bit 28 is VIRTIO_RING_F_INDIRECT_DESC
    [[ ${FEATURES:28:1} == 1 ]] && echo "virtio: indirect descriptors (a request takes one ring entry)" \
        || echo "virtio: no indirect descriptors (a request takes one ring entry per segment, plus two)"
fi
OUT=$(mktemp)
# A private instance: the global trace buffer and its settings stay as they were.
T=$TRACEFS/instances/fjord-block-trace-$$
mkdir "$T"
CMD=
cleanup() {
    [[ -n "$CMD" ]] && kill -TERM "$CMD" 2>/dev/null
    rmdir "$T" 2>/dev/null || true
    rm -f "$OUT"
}
trap cleanup EXIT
echo 0 >"$T/tracing_on"
echo 32768 >"$T/buffer_size_kb"  # per CPU: about 250,000 events
for e in block_rq_issue block_rq_requeue block_rq_complete; do
    echo "dev == $(( (MAJ << 20) | MIN ))" >"$T/events/block/$e/filter"
    echo 1 >"$T/events/block/$e/enable"
done
"$@" &
CMD=$!
sleep "$DELAY"
echo 1 >"$T/tracing_on"
sleep "$SECONDS_TRACED"
echo 0 >"$T/tracing_on"
cat "$T/trace" >"$OUT"
for e in block_rq_issue block_rq_requeue block_rq_complete; do echo 0 >"$T/events/block/$e/enable"; done
rc=0
wait "$CMD" || rc=$?
CMD=
(( rc == 0 )) || echo "block_trace.sh: the command exited with status $rc" >&2
python3 - "$OUT" <<'PY'
import collections, re, sys
# "... 123.456789: block_rq_issue: 254,0 WS 1048576 () 2048 + 2048 ..." (completions have no byte count)
pat = re.compile(r'\s(\d+\.\d+): block_rq_(issue|requeue|complete): \d+,\d+ (\S+) (?:\d+ )?\(\S*\) (\d+) \+ (\d+)')
in_flight = {}        # (sector, sectors) -> first issue time; a flush is (-1, 0)
requeued = {}         # the same, for requests the device handed back, until issued again
sizes = collections.Counter()
latencies = []
requeues = flushes = 0
written = 0
time_at = collections.Counter()  # requests in flight -> seconds
first = last = None
for line in open(sys.argv[1]):
    m = pat.search(line)
    if not m:
        continue
    t, event, rwbs, sector, sectors = float(m[1]), m[2], m[3], int(m[4]), int(m[5])
    key = (-1, 0) if sectors == 0 else (sector, sectors)
    if last is not None:
        time_at[min(len(in_flight), 16)] += t - last
    first = t if first is None else first
    last = t
    if event == 'requeue':
        if key in in_flight:
            requeues += 1
            requeued[key] = in_flight.pop(key)
    elif event == 'issue':
        if key in requeued:  # issued again after a requeue: latency counts from the first issue
            in_flight[key] = requeued.pop(key)
            continue
        in_flight[key] = t
        if sectors:
            sizes[sectors // 2] += 1
        else:
            flushes += 1
    elif key in in_flight:
        issued = in_flight.pop(key)
        if sectors and 'W' in rwbs:
            written += sectors * 512
            latencies.append((t - issued, sectors))
if first is None or last == first:
    sys.exit("no block requests traced")
span = last - first
print(f"traced {span:.2f} s: {sum(sizes.values())} requests, {flushes} flushes, {requeues} requeues, "
      f"written {written / span / 2**30:.2f} GiB/s")
print("request sizes (KiB: count): " + ", ".join(f"{k}: {v}" for k, v in sizes.most_common(6)))
mean = sum(n * s for n, s in time_at.items()) / span
print(f"requests in flight: mean {mean:.1f}; nothing in flight {time_at[0] / span:.1%} of the time; "
      "time by count (16: 16 or more): " + ", ".join(f"{n}: {s / span:.0%}"
                                     for n, s in sorted(time_at.items()) if s / span >= 0.01))
big = sorted(l for l, s in latencies if s >= 1024)
if big:
    print(f"writes of 512 KiB or more: {len(big)}, latency p50 {big[len(big) // 2] * 1e3:.2f} ms, "
          f"mean {sum(big) / len(big) * 1e3:.2f} ms")
PY
