#!/usr/bin/env bash
# Run every cmocka test binary under BUILD/bin/tests (argument 1, default build). A test source
# with a line `moe-test-np: 2 4` also runs under `mpirun -n 2` and `-n 4` (oversubscribed, allowed
# as root, as CI runs). Prints each binary's cmocka summary and a final tally: binaries run and
# failed, and tests passed, failed and skipped, the skips grouped by the reason the test printed
# before skipping (a line `# skipped: REASON`; reasons that name CUDA, a device or NCCL count as
# "no GPU"), and the slowest binaries with their wall times. Exit status is the number of failing
# binaries (capped at 255).
set -u
build=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
MOEFOLD_ROOT=$(pwd)
export MOEFOLD_BIN="$build/bin" MOEFOLD_ROOT
log=$(mktemp)
results=$(mktemp)
times=$(mktemp)
trap 'rm -f "$log" "$results" "$times"' EXIT
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
        t0=$(date +%s.%N)
        if [ "$np" -eq 1 ]; then
            echo "== $rel"
            timeout 600 "$bin" 2>&1 | tee "$log"
        else
            echo "== $rel (mpirun -n $np)"
            timeout 600 mpirun -n "$np" --oversubscribe --bind-to none "$bin" 2>&1 | tee "$log"
        fi
        rc=${PIPESTATUS[0]}
        echo "$(date +%s.%N) $t0 $rel np=$np" | awk '{ printf "%8.1f s  %s %s\n", $1 - $2, $3, $4 }' >>"$times"
        if [ $rc -ne 0 ]; then
            fail=$((fail + 1))
            failed+=("$rel(np=$np,rc=$rc)")
        fi
        # Per-test result lines name their test; under mpirun the ranks' lines interleave, so a
        # result is matched by name to a test some rank started, not to the last "[ RUN ]" line
        # (that dropped a pass now and then). A failure on any rank wins over passes. A skip's
        # reason is the test's "# skipped: REASON" line before it. A result marker after other
        # text (a rank's stderr prefix written in pieces, e.g. "[rank 0] [       OK ] name") is
        # read from the marker on (it dropped a pass on 2026-12-03).
        awk -v bin="$rel" '
            match($0, /\[( RUN      |       OK |  FAILED  |  SKIPPED )\] /) && RSTART > 1 {
                $0 = substr($0, RSTART)
            }
            /^\[ RUN      \] / { seen[$4] = 1; why = ""; next }
            /^# skipped: / { why = substr($0, 12); next }
            /^\[       OK \] / && ($4 in seen) { if (!($4 in res)) res[$4] = "pass"; next }
            /^\[  FAILED  \] / && ($4 in seen) { res[$4] = "fail"; next }
            /^\[  SKIPPED \] / && ($4 in seen) {
                if (why == "") why = "no reason printed (" bin ")"
                if (why ~ /CUDA|cuda|GPU|[Dd]evice|NCCL|nvcc/) why = "no GPU"
                if (res[$4] != "fail") res[$4] = "skip " why
                next
            }
            END { for (t in res) print res[t] }' "$log" >>"$results"
    done
done
passed=$(grep -c '^pass' "$results")
tfailed=$(grep -c '^fail' "$results")
skipped=$(grep -c '^skip' "$results")
echo "================================================================"
echo "test binaries run: $runs, failed: $fail ${failed[*]:-}"
echo "tests passed: $passed, failed: $tfailed, skipped: $skipped"
grep '^skip' "$results" | cut -c6- | sort | uniq -c | sort -rn |
    awk '{n = $1; $1 = ""; printf "  skipped %4d:%s\n", n, $0}'
echo "slowest test binaries (wall seconds; all: $(awk '{ t += $1 } END { printf "%.0f s", t }' "$times")):"
sort -rn "$times" | head -8
[ $fail -gt 255 ] && fail=255
exit $fail
