#!/usr/bin/env bash
# Style made mechanical (CONTRIBUTING.md, "Style"): every C/C++ file laid out as .clang-format says, no
# function in src/ longer than 70 lines, and the Python package (python/) clean under ruff's lint and
# layout (its rules: python/pyproject.toml). `scripts/check_style.sh --fix` reformats in place instead.
# Tools come from the pinned venv .venv-style (scripts/bootstrap.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv-style/bin
max_function_lines=70
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.c')
if [ "${1:-}" = "--fix" ]; then
    "$bin/clang-format" -i "${files[@]}"
    "$bin/ruff" format -q python
    "$bin/ruff" check -q --fix python
    exit 0
fi
status=0
if ! "$bin/clang-format" --dry-run --Werror "${files[@]}" 2>/tmp/check_style.$$; then
    grep -E '^[^ ].*: (error|warning):' /tmp/check_style.$$ | cut -d: -f1 | sort -u | head -20 >&2
    echo "check_style: the files above are not formatted; run scripts/check_style.sh --fix" >&2
    status=1
fi
rm -f /tmp/check_style.$$
# lizard's length counts every line of a function, its signature to its closing brace.
if ! "$bin/lizard" --length "$max_function_lines" --CCN 100000 --arguments 100 --warnings_only src; then
    echo "check_style: functions above are longer than $max_function_lines lines; split them" >&2
    status=1
fi
if ! "$bin/ruff" check -q python || ! "$bin/ruff" format -q --check python; then
    echo "check_style: python/ above is not clean under ruff; run scripts/check_style.sh --fix" >&2
    status=1
fi
exit $status
