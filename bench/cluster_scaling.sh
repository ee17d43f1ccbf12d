#!/usr/bin/env bash
# Throughput of 1, 2, 4 and 6 `fjord serve` node processes on this machine (docs/benchmarks.md,
# "Cluster scaling"). They share its cores, so next to GiB/s the script reports the nodes' CPU seconds per
# GiB moved, the figure that says how the work per byte grows with erasure coding and the data plane.
#
#   1 node : the single-node server (no etcd, no erasure coding): the baseline
#   2 nodes: 1+1   4 nodes: 2+2 (the default)   6 nodes: 4+2 (the default)
#
# Each node runs with --cores 1. One `fjord bench s3` client per node (--cores 1), each with its own
# bucket and that node as coordinator, PUTs and then GETs 16 MiB objects; the clients' concurrency adds up
# to 8. Loopback TCP and the raw disk (O_DIRECT) are measured first, in the same run.
# Knobs (environment): FJORD_BINARY (build/release/fjord), BENCH_DIR (build/bench-cluster),
# BENCH_DURATION (10 s per phase), BENCH_NODES ("1 2 4 6").
set -euo pipefail
cd "$(dirname "$0")/.."
FJORD=${FJORD_BINARY:-build/release/fjord}
WORK=${BENCH_DIR:-build/bench-cluster}
DURATION=${BENCH_DURATION:-10}
NODE_COUNTS=${BENCH_NODES:-"1 2 4 6"}
[[ -x "$FJORD" ]] || { echo "bench/cluster_scaling.sh: $FJORD not found (run make build)" >&2; exit 1; }
command -v etcd >/dev/null || { echo "bench/cluster_scaling.sh: etcd not found (scripts/bootstrap.sh)" >&2; exit 1; }
rm -rf "$WORK"
mkdir -p "$WORK/results"
export FJORD_ACCESS_KEY=fjordbench FJORD_SECRET_KEY=fjordbench-secret-key
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PIDS=() ETCD_PID=
stop_all() {
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
    if [[ -n "$ETCD_PID" ]]; then kill -TERM "$ETCD_PID" 2>/dev/null || true; wait "$ETCD_PID" 2>/dev/null || true; fi
    ETCD_PID=
}
trap 'stop_all; rm -rf "$WORK"/n* "$WORK"/etcd' EXIT
trap 'exit 130' INT TERM

# CPU seconds (user + system) of the node processes so far.
nodes_cpu() {
    local ticks=0 pid
    for pid in "${PIDS[@]}"; do
        ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done
    python3 -c "print($ticks / $(getconf CLK_TCK))"
}

wait_ready() {  # wait_ready PORT
    for _ in $(seq 300); do
        curl -sf -o /dev/null "http://127.0.0.1:$1/health/ready" && return 0
        sleep 0.1
    done
    echo "a node did not become ready" >&2; exit 1
}

start_cluster() {  # start_cluster N: PORTS holds the nodes' S3 ports
    local n=$1 i ids="" extra=()
    PORTS=()
    if [[ $n -gt 1 ]]; then
        local etcd_port peer_port
        etcd_port=$(free_port) peer_port=$(free_port)
        ETCD="http://127.0.0.1:$etcd_port"
        etcd --name bench --data-dir "$WORK/etcd" --listen-client-urls "$ETCD" --advertise-client-urls "$ETCD" \
            --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
            --initial-cluster "bench=http://127.0.0.1:$peer_port" >"$WORK/etcd.log" 2>&1 &
        ETCD_PID=$!
        for _ in $(seq 100); do curl -sf -X POST -d '{"key":"Lw=="}' "$ETCD/v3/kv/range" >/dev/null && break; sleep 0.1; done
        for i in $(seq "$n"); do ids+="n$i,"; done
        local shape=()
        [[ $n -eq 2 ]] && shape=(--data-shards 1 --parity-shards 1)
        "$FJORD" cluster init --etcd "$ETCD" --cluster bench --nodes "${ids%,}" "${shape[@]}" >>"$WORK/init.log"
        extra=(--etcd "$ETCD" --cluster bench --lease-ttl-s 3)
    fi
    for i in $(seq "$n"); do
        local port
        port=$(free_port)
        mkdir -p "$WORK/n$i"
        local node=()
        [[ $n -gt 1 ]] && node=(--node-id "n$i")
        "$FJORD" serve --data "$WORK/n$i" --listen "127.0.0.1:$port" --cores 1 "${extra[@]}" "${node[@]}" \
            >"$WORK/n$i.log" 2>&1 &
        PIDS+=($!)
        PORTS+=("$port")
    done
    for port in "${PORTS[@]}"; do wait_ready "$port"; done
    if [[ $n -gt 1 ]]; then  # every node's map has every node up
        for _ in $(seq 200); do
            [[ $(grep -l "$n members, $n up" "$WORK"/n*.log | wc -l) -eq $n ]] && break
            sleep 0.1
        done
    fi
}

run_phase() {  # run_phase N OP: one client per node, concurrently; prints GiB/s and node CPU s per GiB
    local n=$1 op=$2 i per=$(( (8 + $1 - 1) / $1 )) before after
    before=$(nodes_cpu)
    local clients=()
    for i in $(seq "$n"); do
        "$FJORD" bench s3 --endpoint "http://127.0.0.1:${PORTS[$((i - 1))]}" --bucket "bench-c$i" --op "$op" \
            --size 16MiB --concurrency "$per" --duration "$DURATION" --cores 1 --unique-bodies \
            --json "$WORK/results/$n-$op-$i.json" >/dev/null 2>>"$WORK/bench.log" &
        clients+=($!)
    done
    for pid in "${clients[@]}"; do wait "$pid"; done
    after=$(nodes_cpu)
    python3 - "$WORK/results" "$n" "$op" "$before" "$after" <<'EOF'
import json, sys, glob
results, n, op, before, after = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
runs = [json.load(open(f)) for f in sorted(glob.glob(f"{results}/{n}-{op}-*.json"))]
gib = sum(r["bytes"] for r in runs) / 2**30
seconds = max(r["seconds"] for r in runs)
errors = sum(r["errors"] for r in runs)
print(f"{gib / seconds:.3f} {(after - before) / gib if gib else 0:.2f} {errors}")
EOF
}

echo "limits of this run:"
NET=$("$FJORD" bench net --seconds 3 --json "$WORK/results/net.json" >/dev/null && python3 -c "import json; print(json.load(open('$WORK/results/net.json'))['gib_s'])")
mkdir -p "$WORK/disk"
DISK=$("$FJORD" bench disk --dir "$WORK/disk" --size-mib 1024 --depth 8 --block-kib 1024 --json "$WORK/results/disk.json" >/dev/null && python3 -c "
import json; d = json.load(open('$WORK/results/disk.json')); print(d['write_gib_s'], d['read_gib_s'])")
rm -rf "$WORK/disk"
echo "  loopback TCP ${NET} GiB/s; raw disk write/read ${DISK} GiB/s"
printf "\n| nodes | geometry | PUT GiB/s | node CPU s/GiB (PUT) | GET GiB/s | node CPU s/GiB (GET) | errors |\n"
printf "|---|---|---|---|---|---|---|\n"
for n in $NODE_COUNTS; do
    start_cluster "$n"
    read -r put_rate put_cpu put_errors <<<"$(run_phase "$n" put)"
    read -r get_rate get_cpu get_errors <<<"$(run_phase "$n" get)"
    case $n in 1) shape="none (single node)";; 2) shape="1+1";; 4) shape="2+2";; 6) shape="4+2";; *) shape="default";; esac
    printf "| %s | %s | %s | %s | %s | %s | %s |\n" "$n" "$shape" "$put_rate" "$put_cpu" "$get_rate" "$get_cpu" \
        "$((put_errors + get_errors))"
    stop_all
    rm -rf "$WORK"/n* "$WORK"/etcd
done
