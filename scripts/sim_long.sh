#!/usr/bin/env bash
# Runs the deterministic simulations over many seeds, JOBS processes per simulation, one simulation
# after the other: server_sim (the whole request path), engine_sim (the engine with crashes) and
# cluster_sim (a cluster of nodes with faults and healing; CLUSTER_SEEDS seeds, default 2000: each of
# its seeds runs a whole cluster, about 0.2 s).
# A failure prints its seed and the command that replays it.
# Usage: scripts/sim_long.sh SEEDS FIRST_SEED JOBS [CLUSTER_SEEDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-100000}
first=${2:-1}
jobs=${3:-2}
cluster_seeds=${4:-2000}
all_seeds=$seeds
status=0
for sim in server_sim engine_sim cluster_sim; do
    seeds=$all_seeds
    [ "$sim" = cluster_sim ] && seeds=$cluster_seeds
    dir=$(mktemp -d)
    per=$(((seeds + jobs - 1) / jobs))
    started=0
    for ((j = 0; j < jobs; j++)); do
        start=$((first + j * per))
        count=$((per < seeds - j * per ? per : seeds - j * per))
        [ "$count" -gt 0 ] || continue
        build/release/tests/sim/$sim --seed "$start" --seeds "$count" > "$dir/$j.out" 2>&1 &
        started=$((started + 1))
    done
    wait || true  # each process's summary line says how it ended
    for f in "$dir"/*.out; do grep -a -E "^FAIL|replay|hung" "$f" || true; done
    failed=$(cat "$dir"/*.out | grep -a -E "^$sim: " | awk '{s += $6} END {print s + 0}')
    secs=$(cat "$dir"/*.out | grep -a -E "^$sim: " | awk '{if ($8 > m) m = $8} END {print m + 0}')
    runs=$(cat "$dir"/*.out | grep -a -c -E "^$sim: ")
    echo "$sim: $seeds seeds from $first in $runs processes, $failed failed, ${secs} s"
    # A process without its summary line hung (watchdog) or crashed.
    if [ "$failed" -ne 0 ] || [ "$runs" -ne "$started" ]; then status=1; fi
    rm -rf "$dir"
done
exit $status
