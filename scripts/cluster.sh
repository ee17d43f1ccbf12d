#!/usr/bin/env bash
# A local cluster to try (docs/cluster.md): one etcd and N `fjord serve` node processes on loopback, data
# under ./cluster-data (kept between runs), S3 on 127.0.0.1:9101.., etcd on 127.0.0.1:2389. Ctrl-C stops
# them all (SIGTERM: each node leaves the cluster at once). `make cluster` runs it with 4 nodes.
#
#   scripts/cluster.sh [NODES]          then, in another shell:
#   build/release/fjord cluster status --etcd http://127.0.0.1:2389 --cluster local
#
# The first run writes the topology (fjord cluster init: the default geometry for NODES nodes, 2+2 for
# four); objects written through any node are erasure-coded over all of them.
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=${1:-4}
[[ "$nodes" =~ ^[1-9][0-9]?$ ]] || { echo "cluster: NODES is 1 to 99" >&2; exit 2; }
fjord=build/release/fjord
[[ -x "$fjord" ]] || { echo "cluster: build first (make build)" >&2; exit 1; }
command -v etcd >/dev/null || { echo "cluster: etcd not found (scripts/bootstrap.sh installs etcd-server)" >&2; exit 1; }
root=cluster-data
etcd_url=http://127.0.0.1:2389
mkdir -p "$root/etcd"
pids=()
stop() {
    trap - INT TERM EXIT
    echo "cluster: stopping"
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    # etcd last: the nodes revoke their leases on the way out.
    [[ -n "${etcd_pid:-}" ]] && { kill -TERM "$etcd_pid" 2>/dev/null || true; wait "$etcd_pid" 2>/dev/null || true; }
    exit "${1:-0}"
}
trap 'stop 0' INT TERM
trap 'stop $?' EXIT

# etcd in a session of its own: Ctrl-C reaches the nodes, and etcd is stopped after they left.
setsid etcd --name local --data-dir "$root/etcd/data" --listen-client-urls "$etcd_url" \
    --advertise-client-urls "$etcd_url" --listen-peer-urls http://127.0.0.1:2390 \
    --initial-advertise-peer-urls http://127.0.0.1:2390 --initial-cluster local=http://127.0.0.1:2390 \
    >"$root/etcd/etcd.log" 2>&1 &
etcd_pid=$!
for _ in $(seq 100); do
    curl -sf -X POST -d '{"key":"Lw=="}' "$etcd_url/v3/kv/range" >/dev/null && break
    kill -0 "$etcd_pid" 2>/dev/null || { echo "cluster: etcd exited; see $root/etcd/etcd.log" >&2; exit 1; }
    sleep 0.1
done
ids=$(seq -f "n%g" -s, "$nodes")
"$fjord" cluster init --etcd "$etcd_url" --cluster local --nodes "${ids%,}" || {
    echo "cluster: the topology in $root/etcd was written for other nodes; remove $root to start over" >&2
    exit 1
}
for i in $(seq "$nodes"); do
    mkdir -p "$root/n$i/data"
    "$fjord" serve --data "$root/n$i/data" --listen "127.0.0.1:$((9100 + i))" --cores 1 \
        --etcd "$etcd_url" --cluster local --node-id "n$i" >"$root/n$i/server.log" 2>&1 &
    pids+=($!)
done
sleep 1
"$fjord" cluster status --etcd "$etcd_url" --cluster local || true
echo "cluster: $nodes nodes on 127.0.0.1:9101-$((9100 + nodes)); logs in $root/*/; Ctrl-C stops them"
wait -n "${pids[@]}" "$etcd_pid" || true
echo "cluster: a process exited; see the logs in $root/" >&2
stop 1
