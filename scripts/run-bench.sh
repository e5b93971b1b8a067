#!/usr/bin/env bash
# Run every benchmark binary under BUILD/bin/bench (argument 1, default build) and print its table.
# A benchmark source with a line `moe-bench-np: N` runs under `mpirun -n N`.
set -u
build=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MOEFOLD_ROOT=$(pwd)
export MOEFOLD_BIN="$build/bin" MOEFOLD_ROOT
rc=0
for bin in $(find "$build/bin/bench" -type f -perm -u+x 2>/dev/null | sort); do
    name=$(basename "$bin")
    np=$(grep -o 'moe-bench-np:[ 0-9]*' "tests/bench/$name.c" 2>/dev/null | head -1 | cut -d: -f2 | tr -d ' ')
    echo "## $name"
    if [ -n "$np" ] && [ "$np" -gt 1 ]; then
        mpirun -n "$np" --oversubscribe --bind-to none "$bin" || rc=1
    else
        "$bin" || rc=1
    fi
    echo
done
exit $rc
