#!/usr/bin/env bash
# GPU check of the CUDA backend on one GPU (`make gpu-check`; sized for < 8 minutes on one H200):
#   1. build the CUDA-vs-CPU op test (nvcc: SASS sm_90 + sm_100, PTX for newer),
#   2. run every CUDA op against the CPU op (tests/kernels/test_cuda_ops.c),
#   3. run the same tests under compute-sanitizer memcheck, racecheck and synccheck,
#   4. time the grouped expert GEMM against one dense BF16 cuBLAS GEMM of equal FLOPs (>= 70%),
#   5. train tiny-moe on the GPU, when build/.../moefold-train exists and has a CUDA backend,
# then print a table. Exit status: 0 when every step that ran passed, 1 on any failure, 2 when no
# GPU is present. Steps that cannot run (no engine CUDA path yet, no compute-sanitizer) are
# printed as "skipped" with the reason and do not fail the check.
#
# Usage: scripts/gpu-check.sh [BUILD_DIR]        (default build/gpu; logs in BUILD_DIR/gpu-check,
#                                                  or in $GPU_CHECK_LOGDIR when set)
#        scripts/gpu-check.sh --fetch-debs       (on a Debian/Ubuntu machine with apt: download
#                                                  the build's Debian libraries into .debs/)
# A bare GPU machine may lack the Debian libraries the build links (cmocka, OpenBLAS, GSL, cJSON,
# pkg-config). Fetch them where apt works (`--fetch-debs`, which also lists .debs/ in
# .git/info/exclude) and bring the .debs folder along; this script then unpacks them into a
# private prefix (/tmp/moefold-sysroot) and points pkg-config, the compiler and the loader there.
# Environment: NVCC (default: /usr/local/cuda/bin/nvcc, else nvcc on PATH), CUDA_ARCH (default
# 90), MOEFOLD_GPU_TRAIN_CMD (overrides the training command), GPU_CHECK_JOBS (make -j).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

debs_needed=(pkg-config pkgconf pkgconf-bin libpkgconf3 libcmocka0 libcmocka-dev libopenblas0
    libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5 libquadmath0
    libgsl27 libgslcblas0 libgsl-dev libcjson1 libcjson-dev)

if [ "${1:-}" = "--fetch-debs" ]; then
    mkdir -p .debs && (cd .debs && apt-get download "${debs_needed[@]}") || exit 1
    grep -qx '/.debs/' .git/info/exclude 2>/dev/null || echo '/.debs/' >>.git/info/exclude
    du -sh .debs
    echo "gpu-check: .debs/ ready; carry it to the GPU machine (it is git-ignored locally)"
    exit 0
fi

build=${1:-build/gpu}
logdir=${GPU_CHECK_LOGDIR:-$build/gpu-check}
mkdir -p "$logdir"
t_start=$(date +%s)
budget_s=450 # stop starting optional steps after 7.5 minutes
names=()
states=()
times=()
details=()
failed=0

elapsed() { echo $(($(date +%s) - t_start)); }
record() { # name state seconds detail
    names+=("$1")
    states+=("$2")
    times+=("$3")
    details+=("$4")
    [ "$2" = FAIL ] && failed=1
    printf '[gpu-check] %-22s %-8s %6ss  %s\n' "$1" "$2" "$3" "$4"
}

summary() {
    echo
    echo "# gpu-check summary: ${gpu_name:-no GPU}, driver ${driver:-?}, nvcc ${nvcc_ver:-?}," \
        "total $(elapsed) s"
    printf '%-22s %-8s %8s  %s\n' "step" "status" "time_s" "detail"
    for i in "${!names[@]}"; do
        printf '%-22s %-8s %8s  %s\n' "${names[$i]}" "${states[$i]}" "${times[$i]}" "${details[$i]}"
    done
    echo "# logs: $logdir"
}

# ---- 0. The GPU and the toolkit -----------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU visible (nvidia-smi missing or failing): nothing to check here."
    echo "gpu-check: run this on the lent GPU machine; CPU machines build and skip the CUDA tests."
    exit 2
fi
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
if [ -z "${NVCC:-}" ]; then
    if [ -x /usr/local/cuda/bin/nvcc ]; then
        NVCC=/usr/local/cuda/bin/nvcc
    else
        NVCC=$(command -v nvcc || true)
    fi
fi
if [ -z "$NVCC" ]; then
    record build FAIL 0 "nvcc not found (set NVCC=/path/to/nvcc)"
    summary
    exit 1
fi
nvcc_ver=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
cuda_bin=$(dirname "$NVCC")
sanitizer=$(command -v compute-sanitizer || true)
[ -z "$sanitizer" ] && [ -x "$cuda_bin/compute-sanitizer" ] && sanitizer=$cuda_bin/compute-sanitizer
echo "[gpu-check] $gpu_name, driver $driver, nvcc $nvcc_ver ($NVCC)"

# ---- 1. Libraries: use the system's, or unpack carried Debian packages ------------------------
missing=()
for pc in gsl libcjson openblas cmocka; do
    pkg-config --exists "$pc" 2>/dev/null || missing+=("$pc")
done
if [ ${#missing[@]} -gt 0 ]; then
    if ls .debs/*.deb >/dev/null 2>&1; then
        sysroot=/tmp/moefold-sysroot
        mkdir -p "$sysroot"
        for f in .debs/*.deb; do
            if command -v dpkg-deb >/dev/null 2>&1; then
                dpkg-deb -x "$f" "$sysroot"
            else # a .deb is an ar archive holding data.tar.*; GNU tar detects the compression
                tmp=$(mktemp -d) && (cd "$tmp" && ar x "$root/$f" && tar -xf data.tar.* -C "$sysroot")
                rm -rf "$tmp"
            fi
        done
        multi=$sysroot/usr/lib/x86_64-linux-gnu
        export PATH="$sysroot/usr/bin:$PATH"
        export PKG_CONFIG_LIBDIR="$multi/pkgconfig:$multi/openblas-pthread/pkgconfig:$sysroot/usr/share/pkgconfig"
        export PKG_CONFIG_SYSROOT_DIR="$sysroot"
        export CPATH="$sysroot/usr/include:$sysroot/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
        export LIBRARY_PATH="$multi:$multi/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}"
        export LD_LIBRARY_PATH="$multi:$multi/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        echo "[gpu-check] missing ${missing[*]}: using the carried .debs/ unpacked in $sysroot"
    else
        record build FAIL 0 "missing libraries (${missing[*]}): run 'scripts/gpu-check.sh --fetch-debs' where apt works and carry .debs/"
        summary
        exit 1
    fi
fi

# ---- 2. Build -----------------------------------------------------------------------------------
jobs=${GPU_CHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}
test_bin=$build/bin/tests/kernels/test_cuda_ops
t0=$(date +%s)
if timeout 300 make -j"$jobs" BUILD="$build" NVCC="$NVCC" "$test_bin" >"$logdir/build.log" 2>&1; then
    record build ok $(($(date +%s) - t0)) "$test_bin (log: build.log)"
else
    record build FAIL $(($(date +%s) - t0)) "make failed: see $logdir/build.log"
    tail -30 "$logdir/build.log"
    summary
    exit 1
fi

# ---- 3. CUDA vs CPU op tests ----------------------------------------------------------------
# cmocka prints "[  PASSED  ] n test(s)." and "[  FAILED  ] n test(s)"; on a GPU nothing may skip.
count() { grep -E "^\[ +$1 +\] [0-9]+ test" "$2" | head -1 | sed -E 's/.*\] ([0-9]+) test.*/\1/'; }
t0=$(date +%s)
timeout 300 "$test_bin" >"$logdir/tests.log" 2>&1
rc=$?
passed=$(count PASSED "$logdir/tests.log")
failed_n=$(count FAILED "$logdir/tests.log")
skipped=$(count SKIPPED "$logdir/tests.log")
detail="${passed:-0} passed, ${failed_n:-0} failed, ${skipped:-0} skipped"
if [ $rc -eq 0 ] && [ "${skipped:-0}" = 0 ]; then
    record "cuda-vs-cpu tests" ok $(($(date +%s) - t0)) "$detail"
else
    record "cuda-vs-cpu tests" FAIL $(($(date +%s) - t0)) "$detail (rc $rc; log: tests.log)"
    grep -E "FAILED|error|differ|bad" "$logdir/tests.log" | head -40
fi
grep -E "^# " "$logdir/tests.log"

# ---- 4. compute-sanitizer -------------------------------------------------------------------
for tool in memcheck racecheck synccheck; do
    if [ -z "$sanitizer" ]; then
        record "sanitizer $tool" skipped 0 "compute-sanitizer not found next to nvcc or on PATH"
        continue
    fi
    if [ "$(elapsed)" -gt "$budget_s" ]; then
        record "sanitizer $tool" skipped 0 "time budget spent ($(elapsed) s)"
        continue
    fi
    t0=$(date +%s)
    timeout 170 "$sanitizer" --tool "$tool" --error-exitcode 99 "$test_bin" \
        >"$logdir/sanitizer-$tool.log" 2>&1
    rc=$?
    summary_line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$logdir/sanitizer-$tool.log" | tail -1)
    if [ $rc -eq 0 ]; then
        record "sanitizer $tool" ok $(($(date +%s) - t0)) "${summary_line:-clean}"
    elif [ $rc -eq 124 ]; then
        record "sanitizer $tool" FAIL $(($(date +%s) - t0)) "timed out (170 s)"
    else
        record "sanitizer $tool" FAIL $(($(date +%s) - t0)) "rc $rc: ${summary_line:-see sanitizer-$tool.log}"
        grep -E "=========" "$logdir/sanitizer-$tool.log" | head -30
    fi
done

# ---- 5. Grouped expert GEMM vs dense BF16 GEMM ----------------------------------------------
t0=$(date +%s)
timeout 240 "$test_bin" --bench >"$logdir/bench.log" 2>&1
rc=$?
cat "$logdir/bench.log"
ratios=$(awk '!/^#/ && NF >= 12 {printf "%s%s", sep, $10; sep=" "}' "$logdir/bench.log")
case $rc in
0) record "grouped GEMM bench" ok $(($(date +%s) - t0)) "grouped/dense: $ratios (target >= 70%)" ;;
1) record "grouped GEMM bench" FAIL $(($(date +%s) - t0)) "below 70% of dense: $ratios" ;;
*) record "grouped GEMM bench" FAIL $(($(date +%s) - t0)) "rc $rc (log: bench.log)" ;;
esac

# ---- 6. Training on the GPU (only once the engine has a CUDA path) ---------------------------
train=$build/bin/moefold-train
train_note=""
if [ -z "${MOEFOLD_GPU_TRAIN_CMD:-}" ]; then
    if ! ls engine/*_main.c >/dev/null 2>&1; then
        train_note="no engine yet (engine/*_main.c missing)"
    elif ! timeout 300 make -j"$jobs" BUILD="$build" NVCC="$NVCC" "$train" \
        >"$logdir/build-train.log" 2>&1; then
        train_note="moefold-train did not build here (needs MPI, hwloc: log build-train.log)"
    elif ! "$train" --help 2>&1 | grep -qi cuda; then
        train_note="moefold-train has no CUDA backend yet ('cuda' not in --help)"
    fi
fi
if [ -n "$train_note" ]; then
    record "train tiny-moe" skipped 0 "$train_note"
elif [ "$(elapsed)" -gt "$budget_s" ]; then
    record "train tiny-moe" skipped 0 "time budget spent ($(elapsed) s)"
else
    cmd=${MOEFOLD_GPU_TRAIN_CMD:-"$train --model tiny-moe --backend cuda --steps 30"}
    echo "[gpu-check] training: $cmd"
    t0=$(date +%s)
    # shellcheck disable=SC2086 # the command is a word list by design
    if timeout 180 $cmd >"$logdir/train.log" 2>&1; then
        record "train tiny-moe" ok $(($(date +%s) - t0)) "$(tail -1 "$logdir/train.log")"
    else
        record "train tiny-moe" FAIL $(($(date +%s) - t0)) "see train.log: $(tail -1 "$logdir/train.log")"
    fi
fi

summary
exit $failed
