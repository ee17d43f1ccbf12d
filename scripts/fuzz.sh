#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`) and runs each for SECONDS on a copy of its seed
# corpus: the committed seeds in tests/fuzz/corpus/<target>/ are read only, new inputs go to
# build/fuzz/corpus-<target>/, and reproducers to build/fuzz/artifacts/<target>/.
#
#   scripts/fuzz.sh [SECONDS] [target...]     SECONDS defaults to 600; targets default to all.
#
# Targets run one after another, each as a single process under `nice -n $FUZZ_NICE` (default 19),
# since the build machine is shared. Exits 1 if any target crashed, leaked, timed out or broke an
# invariant, after printing where its reproducer is; replay one with
#   build/fuzz/<target> <reproducer>
set -euo pipefail

cd "$(dirname "$0")/.."
seconds="${1:-600}"
shift || true
all_targets=(fuzz_http_request fuzz_chunked fuzz_sigv4 fuzz_range_conditional fuzz_xml fuzz_journal fuzz_kv fuzz_form)
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=("${all_targets[@]}")
build_dir=build/fuzz
nice_level="${FUZZ_NICE:-19}"

# Longest input worth trying: just past each parser's own limit, or a few records.
max_len_of() {
    case "$1" in
        fuzz_http_request) echo 66000 ;;   # parse_limits::max_head_bytes is 64 KiB
        fuzz_chunked) echo 16384 ;;        # the harness uses 128-byte lines, 256-byte trailers
        fuzz_sigv4) echo 8192 ;;
        fuzz_range_conditional) echo 1024 ;;
        fuzz_xml) echo 65536 ;;
        fuzz_journal) echo 65536 ;;
        fuzz_kv) echo 8192 ;;             # a table of a few entries, or a 4 KiB record header
        fuzz_form) echo 4096 ;;           # the harness uses a 256-byte window, 128-byte part heads
        *) echo "unknown fuzz target: $1" >&2; return 1 ;;
    esac
}

for target in "${targets[@]}"; do max_len_of "$target" >/dev/null; done

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "${JOBS:-2}" --target "${targets[@]}"

failed=()
for target in "${targets[@]}"; do
    corpus="$build_dir/corpus-$target"
    artifacts="$build_dir/artifacts/$target/"
    log="$build_dir/logs/$target.log"
    mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
    cp -n tests/fuzz/corpus/"$target"/* "$corpus"/ 2>/dev/null || true
    echo "== $target: ${seconds}s, corpus $corpus, log $log"
    before=$(ls "$artifacts" | wc -l)
    status=0
    nice -n "$nice_level" "$build_dir/$target" "$corpus" \
        -max_len="$(max_len_of "$target")" -max_total_time="$seconds" -timeout=25 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts" >"$log" 2>&1 ||
        status=$?
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    per_second=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    files=$(ls "$corpus" | wc -l)
    bytes=$(du -sb "$corpus" | cut -f1)
    echo "   executions ${executions:-?} (${per_second:-?}/s), corpus dir $files files / $bytes bytes, exit $status"
    # libFuzzer's own last status line: coverage, features, and the corpus it keeps active.
    grep -E '^#[0-9]+[[:space:]]+(DONE|NEW|REDUCE|pulse|INITED)' "$log" | tail -1 | sed 's/^/   /' || true
    after=$(ls "$artifacts" | wc -l)
    if [[ $status -ne 0 || $after -gt $before ]]; then
        failed+=("$target")
        grep -E "fuzz invariant failed|ERROR: |SUMMARY: |Test unit written to" "$log" | head -8 | sed 's/^/   /'
        echo "   reproducer(s) in $artifacts; replay: $build_dir/$target <file>"
    fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: ${#targets[@]} target(s), ${seconds}s each, no findings"
