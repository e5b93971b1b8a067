#!/usr/bin/env bash
# Build and run the libFuzzer targets (tests/fuzz/fuzz_*.c) for every moefold parser.
#
#   scripts/fuzz.sh [--smoke] SECONDS [TARGET...]      (make fuzz / make fuzz-smoke)
#
# Builds the parser libraries again in build/fuzz with clang -fsanitize=fuzzer-no-link,address,
# undefined (make FUZZ=1 SAN=1; WERROR=0 since clang may warn where the gcc build, which keeps
# -Werror, does not), links each target with -fsanitize=fuzzer, writes seed corpora from
# the real files (tests/fuzz/gen_seeds: presets, plans, Megatron lines and layout strings of
# tests/data/published_runs.json; topologies/*.json; tests/data/hf/*.json; tests/fuzz/seeds/<t>/;
# earlier findings in tests/fuzz/regress/<t>/) and runs each target SECONDS seconds with the
# LeakSanitizer on, -timeout=10 s per input and a 2 GiB RSS limit (1 GiB per malloc).
#   --smoke: a fresh corpus each time and a fixed seed (what `make test` runs); otherwise new
#            inputs accumulate in build/fuzz/corpus/<t>/ across runs.
# Findings (crash, leak, hang, out-of-memory, a broken property from tests/fuzz/fuzz_util.h) are
# saved as build/fuzz/artifacts/<t>-crash-* etc.; replay one with build/fuzz/bin/fuzz/<t> FILE.
# Exit status: the number of failing targets. Without clang's libFuzzer: a skip note, status 0.
set -u
smoke=0
if [ "${1:-}" = --smoke ]; then
    smoke=1
    shift
fi
secs=${1:-300}
shift || true
cd "$(dirname "$0")/.." || exit 1
build=build/fuzz
cc=${FUZZ_CC:-clang}
mkdir -p "$build"

# Does this clang have libFuzzer (and the sanitizers)?
probe="$build/probe"
if ! command -v "$cc" >/dev/null 2>&1 ||
    ! printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' |
    "$cc" -x c -fsanitize=fuzzer,address,undefined -o "$probe" - >/dev/null 2>&1; then
    echo "fuzz: SKIPPED: '$cc' with libFuzzer (-fsanitize=fuzzer) not found; install Debian package clang to run the fuzz targets"
    exit 0
fi

t0=$(date +%s)
if ! make --no-print-directory -j"$(nproc)" BUILD="$build" SAN=1 NO_CUDA=1 NO_MPI=1 FUZZ=1 \
    WERROR=0 FUZZ_CC="$cc" fuzz-bins >"$build/build.log" 2>&1; then
    cat "$build/build.log"
    echo "fuzz: build failed (log above)"
    exit 1
fi

# Seed corpora.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
seeds="$build/seeds"
rm -rf "$seeds"
mkdir -p "$seeds"
if ! "$build/bin/fuzz/gen_seeds" "$seeds" tests/data/published_runs.json >"$build/seeds.log" 2>&1; then
    cat "$build/seeds.log"
    echo "fuzz: writing the seed corpora failed"
    exit 1
fi
mkdir -p "$seeds/cluster" "$seeds/hf_config"
cp topologies/*.json "$seeds/cluster/"
cp tests/data/hf/*.json "$seeds/hf_config/"
cp tests/data/hf/*.json "$seeds/model_json/"
cp tests/data/published_runs.json "$seeds/published_runs/all.json"
for extra in tests/fuzz/seeds tests/fuzz/regress; do
    for d in "$extra"/*/; do
        [ -d "$d" ] || continue
        t=$(basename "$d")
        mkdir -p "$seeds/$t"
        cp "$d"* "$seeds/$t/" 2>/dev/null
    done
done

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for src in tests/fuzz/fuzz_*.c; do
        t=$(basename "$src" .c)
        targets+=("${t#fuzz_}")
    done
fi

mkdir -p "$build/artifacts" "$build/logs"
fail=0
failed=()
printf 'fuzz: %s s per target, %d targets%s\n' "$secs" ${#targets[@]} "$([ $smoke -eq 1 ] && echo ' (smoke)')"
printf '%-16s %8s %10s %8s %8s  %s\n' target seeds runs exec/s cov result
for t in "${targets[@]}"; do
    bin="$build/bin/fuzz/fuzz_$t"
    if [ $smoke -eq 1 ]; then
        corpus="$build/smoke/$t"
        rm -rf "$corpus"
        extra_opts=(-seed=1)
    else
        corpus="$build/corpus/$t"
        extra_opts=()
    fi
    mkdir -p "$corpus" "$seeds/$t"
    dict=tests/fuzz/$t.dict
    case $t in
    hf_config) dict=tests/fuzz/model_json.dict ;;
    esac
    log="$build/logs/$t.log"
    "$bin" "$corpus" "$seeds/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=1024 -detect_leaks=1 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$t-" ${dict:+-dict="$dict"} "${extra_opts[@]}" \
        >"$log" 2>&1
    rc=$?
    nseeds=$(find "$seeds/$t" -type f | wc -l)
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
    if [ $rc -eq 0 ]; then
        result=ok
    else
        result="FAILED (rc=$rc, log $log)"
        fail=$((fail + 1))
        failed+=("$t")
    fi
    printf '%-16s %8s %10s %8s %8s  %s\n' "$t" "$nseeds" "${runs:-?}" "${rate:-?}" "${cov:-?}" "$result"
    if [ $rc -ne 0 ]; then
        grep -E 'ERROR|SUMMARY|fuzz property|runtime error|Test unit written' "$log" | head -8 | sed 's/^/    /'
    fi
done
echo "fuzz: ${#targets[@]} targets, $fail failed${failed[*]:+: ${failed[*]}} ($(($(date +%s) - t0)) s)"
[ $fail -gt 255 ] && fail=255
exit $fail
