#!/usr/bin/env bash
# Fail on any #include edge between top-level directories that STYLE.md §1 does not allow.
#   model/      -> model/
#   kernels/    -> kernels/, model/
#   topologies/ -> topologies/, model/
#   planner/    -> planner/, topologies/, model/
#   engine/     -> engine/, kernels/, topologies/, model/      (never planner/)
#   cli/        -> cli/, planner/, topologies/, model/          (the moefold binary: no engine)
#   tests/<d>/  -> what <d> may include, plus tests/
# and engine/ files call down only, in the order of ENGINE_ORDER below.
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
# The engine reads top-down: each engine/*.c file calls only functions of the files listed after it
# here (engine -> pipeline -> layers -> moe_block -> kernels/comm), never one of a file before it,
# so no helper calls back up into the file that drives it. A new engine file gets its place here.
ENGINE_ORDER="train_main bench_main report engine checkpoint activations pipeline mtp head layers
    attention mla moe_block allgather hier experts linear optimizer staging model timing data groups
    bench context comm_nccl comm_mpi comm device arena check"
# Non-static function definitions ("name file"): a "{" alone at column 0 closes a definition's
# header (clang-format's function braces); comments and strings are ignored.
engine_src() { gcc -fpreprocessed -dD -E -P "$1" 2>/dev/null | sed -E 's/"([^"\\]|\\.)*"//g'; }
engine_defs=$(for f in $(git ls-files 'engine/*.c'); do
    engine_src "$f" | awk -v file="$(basename "$f" .c)" '
        /^\{$/ { pre = substr(hdr, 1, index(hdr, "("))
                 if (pre !~ /(^|[ \t])static[ \t]/ && match(hdr, /[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
                     name = substr(hdr, RSTART, RLENGTH); sub(/[ \t]*\($/, "", name); print name, file }
                 hdr = ""; next }
        /;[ \t]*$/ { hdr = ""; next }
        /^[A-Za-z_]/ { hdr = hdr == "" ? $0 : hdr " " $0; next }
        /^[ \t]/ && hdr != "" { hdr = hdr " " $0; next }
        { hdr = "" }'
done)
declare -A engine_rank engine_file
i=0
for g in $ENGINE_ORDER; do
    engine_rank[$g]=$i
    i=$((i + 1))
done
while read -r name file; do
    [ -n "$name" ] && engine_file[$name]=$file
done <<<"$engine_defs"
for f in $(git ls-files 'engine/*.c'); do
    from=$(basename "$f" .c)
    rf=${engine_rank[$from]:--1}
    if [ "$rf" -lt 0 ]; then
        echo "layers: $f is not in ENGINE_ORDER (scripts/check-layers.sh): give it its place"; bad=1
        continue
    fi
    for name in $(engine_src "$f" | grep -oE '\bmoe_[a-z0-9_]+[ \t]*\(' | tr -d ' \t(' | sort -u); do
        to=${engine_file[$name]:-}
        [ -z "$to" ] || [ "$to" = "$from" ] && continue
        if [ "${engine_rank[$to]:--1}" -le "$rf" ]; then
            echo "layers: $f calls $name of engine/$to.c, which comes before it in ENGINE_ORDER" \
                "(the engine reads top-down)"; bad=1
        fi
    done
done
[ $bad -eq 0 ] && echo "layers: ok"
exit $bad
