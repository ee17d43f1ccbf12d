#!/usr/bin/env bash
# Shows that the simulations find real bugs on their own: each patch in tests/sim/mutants/ puts back a
# bug from the project's history (see the patch's name and docs/reliability.md); with it applied, the
# simulation it names (cluster-*: cluster_sim on 4 nodes; the others: server_sim) must fail within
# SEEDS seeds. Every patch is reverted afterwards, also on error
# or interrupt, and server_sim is rebuilt from the clean tree.
# Usage: scripts/sim_mutants.sh [SEEDS]   (default 1000; run from a tree with no changes under src/store
# or src/cluster)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-1000}
build=build/release
applied=""
restore() {
    if [ -n "$applied" ]; then patch -s -R -p1 < "$applied"; applied=""; fi
}
trap restore EXIT INT TERM
status=0
for p in tests/sim/mutants/*.patch; do
    name=$(basename "$p" .patch)
    patch -s -p1 --dry-run < "$p" >/dev/null || { echo "sim_mutants: $name no longer applies" >&2; exit 1; }
    patch -s -p1 < "$p"
    applied=$p
    case $name in
        cluster-*) sim=cluster_sim; args=(--nodes 4 --requests 80) ;;
        *) sim=server_sim; args=() ;;
    esac
    cmake --build "$build" --target "$sim" >/dev/null
    if out=$("$build/tests/sim/$sim" --seed 1 --seeds "$seeds" "${args[@]}" 2>&1); then
        echo "sim_mutants: $name: NOT caught in $seeds seeds"
        status=1
    else
        first=$(printf '%s\n' "$out" | grep -a -m1 '^FAIL' || true)
        failed=$(printf '%s\n' "$out" | grep -a -c '^FAIL' || true)
        echo "sim_mutants: $name: caught in $failed of $seeds seeds; first: $first"
    fi
    restore
done
cmake --build "$build" --target server_sim --target cluster_sim >/dev/null
exit $status
