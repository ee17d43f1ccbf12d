#!/usr/bin/env bash
# `make check`: the development loop, under five minutes on a 2-core machine once the first build is
# done (make test is the full suite). In order, stopping at the first failure: the layering and style
# gates, the doc-path check, an incremental release build, and every ctest test (unit tests, and the
# simulations on a few hundred seeds each: tests/sim/CMakeLists.txt). Prints how long each step took.
# Usage: scripts/check.sh [JOBS]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-2}
ms() { echo $(($(date +%s%N) / 1000000)); }
started=$(ms)
step() {  # step NAME COMMAND...: runs it, then prints its time
    local name=$1 t0
    shift
    t0=$(ms)
    "$@"
    printf 'check: %-8s %4d.%d s\n' "$name" $((($(ms) - t0) / 1000)) $((($(ms) - t0) % 1000 / 100))
}
step boundary scripts/check_boundary.sh
step style scripts/check_style.sh
step docs scripts/check_doc_paths.py
step build cmake --build --preset release -j "$jobs"
step ctest ctest --preset release -j "$jobs"
echo "check: passed in $((($(ms) - started) / 1000)) s (the budget is 300 s; make test runs the whole suite)"
