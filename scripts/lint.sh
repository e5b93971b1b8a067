#!/usr/bin/env bash
# `make lint`: static checks beyond the compiler's warnings. shellcheck on every shell script,
# cppcheck (warning, portability and performance classes) on the C sources, then the layering,
# header and format checks. Tools that are not installed are reported and skipped; any finding
# makes the exit status non-zero.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
fail=0

if command -v shellcheck >/dev/null; then
    mapfile -t sh < <(git ls-files '*.sh' .ci/run)
    if shellcheck -x "${sh[@]}"; then
        echo "shellcheck: ok (${#sh[@]} scripts)"
    else
        fail=1
    fi
else
    echo "shellcheck: not installed, skipped"
fi

if command -v cppcheck >/dev/null; then
    mapfile -t src < <(git ls-files 'model/*.c' 'planner/*.c' 'topologies/*.c' 'cli/*.c' \
        'engine/*.c' 'kernels/*.c')
    # -D__GNUC__: the sources use GNU attributes behind that macro; missingIncludeSystem: system
    # headers are not given to cppcheck.
    if cppcheck --quiet --error-exitcode=1 --enable=warning,portability,performance \
        --std=c11 -I. -D__GNUC__ --suppress=missingIncludeSystem --inline-suppr \
        -j "$(nproc)" "${src[@]}"; then
        echo "cppcheck: ok (${#src[@]} files)"
    else
        fail=1
    fi
else
    echo "cppcheck: not installed, skipped"
fi

make --no-print-directory layers headers format-check || fail=1
exit $fail
