#!/usr/bin/env bash
# Run every cmocka test binary under BUILD/bin/tests (argument 1, default build). A test source
# with a line `moe-test-np: 2 4` also runs under `mpirun -n 2` and `-n 4` (oversubscribed, allowed
# as root, as CI runs). Prints each binary's cmocka summary and a final tally; exit status is the
# number of failing binaries (capped at 255).
set -u
build=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
MOEFOLD_ROOT=$(pwd)
export MOEFOLD_BIN="$build/bin" MOEFOLD_ROOT
fail=0
runs=0
failed=()
for bin in $(find "$build/bin/tests" -type f -perm -u+x | sort); do
    rel=${bin#"$build"/bin/tests/}
    src="tests/$rel.c"
    nps=$(grep -o 'moe-test-np:[ 0-9]*' "$src" 2>/dev/null | head -1 | cut -d: -f2)
    [ -n "$nps" ] || nps=1
    for np in $nps; do
        runs=$((runs + 1))
        if [ "$np" -eq 1 ]; then
            echo "== $rel"
            timeout 600 "$bin"
        else
            echo "== $rel (mpirun -n $np)"
            timeout 600 mpirun -n "$np" --oversubscribe --bind-to none "$bin"
        fi
        rc=$?
        if [ $rc -ne 0 ]; then
            fail=$((fail + 1))
            failed+=("$rel(np=$np,rc=$rc)")
        fi
    done
done
echo "================================================================"
echo "test binaries run: $runs, failed: $fail ${failed[*]:-}"
[ $fail -gt 255 ] && fail=255
exit $fail
