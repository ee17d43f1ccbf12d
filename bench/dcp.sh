#!/usr/bin/env bash
# PyTorch checkpointing against the physical limit, in one run: save and load a synthetic sharded state
# dict (BENCH_DCP_GIB in all, over BENCH_DCP_RANKS gloo ranks) with torch.distributed.checkpoint through
# fjord.torch, s3torchconnector's DCP writer/reader, torch's FsspecWriter over s3fs, and torch's
# FileSystemWriter on the same disk, all against one fresh `fjord serve`; and the raw O_DIRECT disk
# limit of the same run beside them (`fjord bench disk`, best of a few shapes). See bench/dcp_bench.py.
#
# Knobs: FJORD_BINARY (build/release/fjord), BENCH_DIR (build/bench-dcp), BENCH_DCP_GIB (4),
# BENCH_DCP_RANKS (4), BENCH_DCP_METHODS (fjord,s3torchconnector,s3fs,local), BENCH_SERVER_CORES (all),
# BENCH_DCP_WRITER / BENCH_DCP_READER (FjordStorageWriter / Reader integer options, e.g.
# "objects_in_flight=8,in_flight=4" / "items_in_flight=16,range_size=33554432").
# Python: build/venv-bench, a venv with fjord (pip install ./python) and s3fs that sees the shared torch
# venv (torch, s3torchconnector) through a .pth file, as scripts/python_sdk.sh does for the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
FJORD=${FJORD_BINARY:-build/release/fjord}
WORK=${BENCH_DIR:-build/bench-dcp}
GIB=${BENCH_DCP_GIB:-4}
RANKS=${BENCH_DCP_RANKS:-4}
METHODS=${BENCH_DCP_METHODS:-fjord,s3torchconnector,s3fs,local}
SERVER_CORES=${BENCH_SERVER_CORES:-$(nproc)}
[[ -x "$FJORD" ]] || { echo "bench/dcp.sh: $FJORD not found (run make build)" >&2; exit 1; }

venv=build/venv-bench
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
fi
torch_site=$(.venv-torch/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$torch_site" > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/fjord-torch-venv.pth"
"$venv/bin/pip" install -q s3fs ./python

rm -rf "$WORK"
mkdir -p "$WORK/data" "$WORK/local"
export FJORD_ACCESS_KEY=fjordbench FJORD_SECRET_KEY=fjordbench-secret-key
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export FJORD_ENDPOINT="http://127.0.0.1:$PORT" AWS_ENDPOINT_URL="http://127.0.0.1:$PORT"
export AWS_ACCESS_KEY_ID=$FJORD_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$FJORD_SECRET_KEY AWS_REGION=us-east-1
"$FJORD" serve --data "$WORK/data" --listen "127.0.0.1:$PORT" --cores "$SERVER_CORES" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
export BENCH_SERVER_PID=$SERVER_PID
trap 'kill -TERM $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null; rm -rf "$WORK/data" "$WORK/local"' EXIT
for _ in $(seq 200); do curl -sf -o /dev/null "$FJORD_ENDPOINT/health/ready" && break; sleep 0.1; done

echo "== disk (raw O_DIRECT, on the server's file system)"
for shape in 4:1024 32:1024 8:256; do
    "$FJORD" bench disk --dir "$WORK/data" --size-mib 1024 --depth "${shape%%:*}" --block-kib "${shape##*:}" \
        --passes 2 --json "$WORK/disk-${shape/:/-}.json" >/dev/null
done
echo "== DCP, $GIB GiB over $RANKS ranks"
"$venv/bin/python" bench/dcp_bench.py run --bucket dcp-bench --local-dir "$WORK/local" --gib "$GIB" \
    --ranks "$RANKS" --methods "$METHODS" --json "$WORK/dcp.json"
"$venv/bin/python" - "$WORK" <<'PY'
import glob, json, sys
work = sys.argv[1]
disks = [json.load(open(f)) for f in glob.glob(f"{work}/disk-*.json")]
write = max(d["write_gib_s"] for d in disks)
first = max(d["first_pass_write_gib_s"] for d in disks)
read = max(d["read_gib_s"] for d in disks)
results = {r["method"]: r for r in json.load(open(f"{work}/dcp.json"))}
print(f"\nraw disk: write {write:.3f} GiB/s (first pass, into fresh space: {first:.3f}), read {read:.3f} GiB/s "
      f"(best of {len(disks)} shapes)")
print("save: the third save, after the first was deleted (disk: write); first save: into fresh space (disk: first pass)")
print(f"{'path':18s} {'save GiB/s':>10s} {'/disk':>6s} {'1st save':>9s} {'/disk':>6s} {'load GiB/s':>10s} {'/disk':>6s}  identical")
for m, r in results.items():
    print(f"{m:18s} {r['save_gib_s']:10.3f} {r['save_gib_s'] / write:6.2f} {r['fresh_save_gib_s']:9.3f} "
          f"{r['fresh_save_gib_s'] / first:6.2f} {r['load_gib_s']:10.3f} {r['load_gib_s'] / read:6.2f}  {r['identical']}")
print("CPU seconds per GiB (ranks, all their threads; server):")
for m, r in results.items():
    print(f"  {m:16s} save {r['save_rank_cpu_s_per_gib']:.2f} + {r['save_server_cpu_s_per_gib']:.2f}   "
          f"load {r['load_rank_cpu_s_per_gib']:.2f} + {r['load_server_cpu_s_per_gib']:.2f}")
if "fjord" in results and "s3torchconnector" in results:
    f, s = results["fjord"], results["s3torchconnector"]
    print(f"fjord / s3torchconnector: save {f['save_gib_s'] / s['save_gib_s']:.2f}x, "
          f"load {f['load_gib_s'] / s['load_gib_s']:.2f}x")
if "fjord" in results:
    f = results["fjord"]
    print(f"async_save blocked the caller {f['async_warm_blocked_s']:.2f} s (the first, which allocates the "
          f"staging buffers, {f['async_first_blocked_s']:.2f} s); a blocking save took {f['save_s']:.2f} s "
          f"(async save total {f['async_warm_total_s']:.2f} s)")
if not next(iter(results.values()))["page_cache_dropped"]:
    print("note: the page cache could not be dropped before loads (the local path may read from memory)")
json.dump({"disk_write_gib_s": write, "disk_first_pass_write_gib_s": first, "disk_read_gib_s": read,
           "results": results},
          open(f"{work}/summary.json", "w"), indent=1)
PY
