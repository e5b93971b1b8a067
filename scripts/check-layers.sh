#!/usr/bin/env bash
# Fail on any #include edge between top-level directories that STYLE.md §1 does not allow.
#   model/      -> model/
#   kernels/    -> kernels/, model/
#   topologies/ -> topologies/, model/
#   planner/    -> planner/, topologies/, model/
#   engine/     -> engine/, kernels/, topologies/, model/      (never planner/)
#   cli/        -> cli/, planner/, topologies/, model/          (the moefold binary: no engine)
#   tests/<d>/  -> what <d> may include, plus tests/
set -u
allowed() {
    case "$1" in
    model) echo "model" ;;
    kernels) echo "kernels model" ;;
    topologies) echo "topologies model" ;;
    planner) echo "planner topologies model" ;;
    engine) echo "engine kernels topologies model" ;;
    cli) echo "cli planner topologies model" ;;
    *) echo "" ;;
    esac
}
bad=0
for f in $(git ls-files '*.c' '*.h' '*.cu' '*.cuh'); do
    top=${f%%/*}
    from=$top
    if [ "$top" = tests ]; then
        sub=$(echo "$f" | cut -d/ -f2)
        from=$sub
        [ -d "tests/$sub" ] || from=engine   # tests/test_util.* may include any layer's headers
    fi
    ok=$(allowed "$from")
    [ "$top" = tests ] && ok="$ok tests"
    [ -z "$(allowed "$from")" ] && continue
    while IFS= read -r inc; do
        dir=${inc%%/*}
        [ "$dir" = "$inc" ] && continue
        case " $ok " in *" $dir "*) ;; *)
            echo "layers: $f includes \"$inc\" ($from may include only: $ok)"; bad=1 ;;
        esac
    done < <(grep -oE '^#include "[^"]+"' "$f" | sed -E 's/#include "([^"]+)"/\1/')
done
# Planner side must not touch MPI, CUDA or hwloc headers.
if git ls-files 'planner/*' 'model/*' 'cli/*' | xargs grep -lE '#include <(mpi|cuda|cuda_runtime|nccl|hwloc|cublas)' 2>/dev/null; then
    echo "layers: planner/model/cli include MPI, CUDA or hwloc headers"; bad=1
fi
# model/ is pure: no stdio, environment, clock or unseeded randomness (comments and strings ignored).
for f in $(git ls-files 'model/*.c' 'model/*.h'); do
    hits=$(gcc -fpreprocessed -dD -E -P "$f" 2>/dev/null | sed -E 's/"([^"\\]|\\.)*"//g' |
        grep -nE '\bFILE\b|\b(printf|fprintf|fopen|fputs|puts|getenv|clock_gettime|gettimeofday|rand|srand|time)[[:space:]]*\(' |
        grep -v 'format(printf')
    if [ -n "$hits" ]; then
        echo "layers: $f does I/O, reads the environment or the clock:"
        echo "$hits"
        bad=1
    fi
done
[ $bad -eq 0 ] && echo "layers: ok"
exit $bad
