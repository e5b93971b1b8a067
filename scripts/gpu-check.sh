#!/usr/bin/env bash
# GPU check of the CUDA backend and the engine on one GPU (`make gpu-check`). Under 8 minutes on
# one H200 by construction: every step runs under a timeout taken from what is left of a 465 s
# budget (a step that cannot get its minimum is reported "skipped"), and every run is bounded in
# steps and sizes. In order of importance:
#   1. build the op tests, the engine's GPU tests, moefold and moefold-train (nvcc: SASS sm_90 +
#      sm_100, PTX for newer),
#   2. every CUDA op against the CPU op (tests/kernels/test_cuda_ops.c),
#   3. the engine's GPU tests: NCCL backend vs MPI (tests/engine/test_comm_nccl.c) and the CUDA
#      engine vs the CPU engine (tests/engine/test_engine_cuda.c: gradients, losses, recompute,
#      offload, checkpoints, NaN naming, CUDA graphs, run.json),
#   4. moefold-train --backend cuda --trace on tiny-moe (FP32 GEMMs) and on a larger single-GPU MoE,
#      tests/data/models/gpu-moe.json (8 layers, hidden 2048, 16 experts top-2 + shared expert,
#      vocab 32768, seq 2048, mbs 2, gbs 16; BF16 GEMM math on fp32 storage): step time, phase
#      times (CUDA events) and memory (engine categories + cudaMemGetInfo), against
#      `moefold predict` for the same model and layout on dgx-h200 with one GPU per node (a cluster
#      file derived from topologies/dgx-h200.json into a temp dir: --gpus must be a multiple of
#      gpus_per_node), and the MFU against the BF16 dense peak of that cluster file (target 40%);
#      `moefold compare` of each run against the emitted plan, with both timelines in one trace, and
#      gpu-moe again with the optimizer offloaded to the host (--optimizer-cpu-offload),
#   5. the grouped expert GEMM against one dense BF16 cuBLAS GEMM of equal FLOPs (target 70%),
#   6. the op tests under compute-sanitizer memcheck, racecheck and synccheck, as time allows,
# then print a table. Exit status: 0 when every step that ran passed, 1 on any failure, 2 when no
# GPU is present. A missed performance target is reported as MISS (it does not fail the check).
#
# Usage: scripts/gpu-check.sh [BUILD_DIR]        (default build/gpu; logs in BUILD_DIR/gpu-check,
#                                                  or in $GPU_CHECK_LOGDIR when set)
#        scripts/gpu-check.sh --fetch-debs       (on a Debian machine with apt: download the
#                                                  build's Debian libraries into .debs/)
# A bare GPU machine may lack the Debian libraries the build links (cmocka, OpenBLAS, GSL, cJSON,
# Open MPI, hwloc, pkg-config). Fetch them where apt works (`--fetch-debs`, which also lists
# .debs/ in .git/info/exclude) and bring the .debs folder along; this script then unpacks them
# into a private prefix (/tmp/moefold-sysroot) and points pkg-config, the compiler, the loader and
# Open MPI (OPAL_PREFIX) there.
# Environment: NVCC (default: /usr/local/cuda/bin/nvcc, else nvcc on PATH), CUDA_ARCH (default
# 90), NCCL_HOME (default: the toolkit's, /usr, else python3's nvidia.nccl wheel), GPU_CHECK_JOBS
# (make -j), GPU_CHECK_BUDGET_S (default 465), GPU_CHECK_FORCE_DEBS=1 (use .debs/ even where the
# system has the libraries), GPU_CHECK_PROFILE=1 (then scripts/gpu-profile.sh: the GPU time of
# one gpu-moe step per kernel, through CUPTI), GPU_CHECK_ONLY=LIST (the build, then only the named
# steps of ops,nccl,engine,train,bench,sanitizer,profile). The build runs with WERROR=0: another compiler's new warnings must
# not stop a check of the GPU code.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

# Build libraries, and Open MPI + hwloc with their runtime libraries, and make (Debian 12 names;
# the C compiler, the core C/C++ runtime, zlib and udev are left to the machine).
debs_needed=(pkg-config pkgconf pkgconf-bin libpkgconf3 libcmocka0 libcmocka-dev libopenblas0
    libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5 libquadmath0
    libgsl27 libgslcblas0 libgsl-dev libcjson1 libcjson-dev
    openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libevent-2.1-7
    libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 libhwloc-dev libhwloc-plugins
    libfabric1 libucx0 libibverbs1 ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1
    libnl-3-200 libnl-route-3-200 libnuma1 libpciaccess0 libmunge2 libxnvctrl0 libltdl7 make)

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
budget_s=${GPU_CHECK_BUDGET_S:-465} # every step ends by then: the whole script stays under 8 min
names=()
states=()
times=()
details=()
failed=0

# want STEP: the step is asked for (GPU_CHECK_ONLY unset, or the comma list names it).
want() { [ -z "${GPU_CHECK_ONLY:-}" ] || [[ ",$GPU_CHECK_ONLY," == *",$1,"* ]]; }
elapsed() { echo $(($(date +%s) - t_start)); }
left() { echo $((budget_s - $(elapsed))); }
record() { # name state seconds detail
    names+=("$1")
    states+=("$2")
    times+=("$3")
    details+=("$4")
    [ "$2" = FAIL ] && failed=1
    printf '[gpu-check] %-24s %-8s %6ss  %s\n' "$1" "$2" "$3" "$4"
}
# step_timeout CAP MIN: seconds a step may take now (0 when fewer than MIN are left).
step_timeout() {
    local t
    t=$(($(left) - 5))
    [ "$t" -gt "$1" ] && t=$1
    [ "$t" -lt "$2" ] && t=0
    echo "$t"
}

summary() {
    echo
    echo "# gpu-check summary: ${gpu_name:-no GPU}, driver ${driver:-?}, nvcc ${nvcc_ver:-?}," \
        "total $(elapsed) s"
    printf '%-24s %-8s %8s  %s\n' "step" "status" "time_s" "detail"
    for i in "${!names[@]}"; do
        printf '%-24s %-8s %8s  %s\n' "${names[$i]}" "${states[$i]}" "${times[$i]}" "${details[$i]}"
    done
    [ -f "$logdir/predicted-vs-measured.txt" ] && cat "$logdir/predicted-vs-measured.txt"
    echo "# logs: $logdir"
}

# cmocka prints "[  PASSED  ] n test(s)." and "[  FAILED  ] n test(s)"; count them.
count() { grep -E "^\[ +$1 +\] [0-9]+ test" "$2" | head -1 | sed -E 's/.*\] ([0-9]+) test.*/\1/'; }

# run_tests NAME BIN CAP MIN EXPECTED_SKIPS: a cmocka binary that must pass with that many skips.
run_tests() {
    local name=$1 bin=$2 cap=$3 min=$4 want_skips=$5 t t0 rc log passed failed_n skipped
    t=$(step_timeout "$cap" "$min")
    if [ "$t" -eq 0 ]; then
        record "$name" skipped 0 "time budget spent ($(elapsed) s)"
        return
    fi
    log=$logdir/$(basename "$bin").log
    t0=$(date +%s)
    timeout "$t" "$bin" >"$log" 2>&1
    rc=$?
    passed=$(count PASSED "$log")
    failed_n=$(count FAILED "$log")
    skipped=$(count SKIPPED "$log")
    local detail="${passed:-0} passed, ${failed_n:-0} failed, ${skipped:-0} skipped"
    if [ $rc -eq 0 ] && [ "${skipped:-0}" = "$want_skips" ]; then
        record "$name" ok $(($(date +%s) - t0)) "$detail"
    else
        [ $rc -eq 124 ] && detail="$detail, timed out after $t s"
        record "$name" FAIL $(($(date +%s) - t0)) "$detail (rc $rc; log: $(basename "$log"))"
        grep -E "FAILED|ERROR|error|differ|skipped:|rel " "$log" | head -30
    fi
    grep -E "^# |^  " "$log" | head -40
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
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Every rank of this check is on this host: NCCL's bootstrap may use the loopback interface.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
missing=()
for pc in gsl libcjson openblas cmocka hwloc; do
    pkg-config --exists "$pc" 2>/dev/null || missing+=("$pc")
done
pkg-config --exists ompi-c 2>/dev/null || pkg-config --exists mpi-c 2>/dev/null ||
    command -v mpicc >/dev/null 2>&1 || missing+=(ompi-c)
command -v make >/dev/null 2>&1 || missing+=(make)
# GPU_CHECK_FORCE_DEBS=1: use the carried packages even where the system has (other versions of)
# the libraries.
[ "${GPU_CHECK_FORCE_DEBS:-0}" = 1 ] && [ ${#missing[@]} -eq 0 ] && missing+=(forced)
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
        export PKG_CONFIG_LIBDIR="$multi/pkgconfig:$multi/openblas-pthread/pkgconfig:$multi/openmpi/lib/pkgconfig:$sysroot/usr/share/pkgconfig"
        export PKG_CONFIG_SYSROOT_DIR="$sysroot"
        # Keep -L/-I of the packages' own "system" folders: under the sysroot they are not the
        # system's, and the compiler's default folders (searched before LIBRARY_PATH) may hold
        # other versions.
        export PKG_CONFIG_ALLOW_SYSTEM_LIBS=1 PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1
        export CPATH="$sysroot/usr/include:$sysroot/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
        export LIBRARY_PATH="$multi:$multi/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}"
        export LD_LIBRARY_PATH="$multi:$multi/openblas-pthread:$multi/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        export OPAL_PREFIX="$sysroot/usr" # Open MPI finds its components and orted under it
        echo "[gpu-check] missing ${missing[*]}: using the carried .debs/ unpacked in $sysroot"
    else
        record build FAIL 0 "missing libraries (${missing[*]}): run 'scripts/gpu-check.sh --fetch-debs' where apt works and carry .debs/"
        summary
        exit 1
    fi
fi

# NCCL: the toolkit's or the system's (the Makefile finds those), else the one in the NVIDIA wheel
# beside PyTorch (python3's nvidia.nccl: include/nccl.h, lib/libnccl.so.2), through a folder that
# adds the unversioned libnccl.so the linker asks for.
cuda_home=$(dirname "$cuda_bin")
if [ -z "${NCCL_HOME:-}" ]; then
    for d in "$cuda_home" /usr; do
        [ -f "$d/include/nccl.h" ] && NCCL_HOME=$d && break
    done
fi
if [ -z "${NCCL_HOME:-}" ] && command -v python3 >/dev/null 2>&1; then
    wheel=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
    if [ -n "$wheel" ] && [ -f "$wheel/include/nccl.h" ]; then
        NCCL_HOME=/tmp/moefold-nccl
        mkdir -p "$NCCL_HOME/lib"
        ln -sfn "$wheel/include" "$NCCL_HOME/include"
        for f in "$wheel"/lib/libnccl.so*; do
            ln -sf "$f" "$NCCL_HOME/lib/"
        done
        [ -e "$NCCL_HOME/lib/libnccl.so" ] ||
            ln -sf "$(ls "$wheel"/lib/libnccl.so.* | head -1)" "$NCCL_HOME/lib/libnccl.so"
        export LD_LIBRARY_PATH="$NCCL_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
fi
echo "[gpu-check] NCCL: ${NCCL_HOME:-not found (the NCCL tests will fail)}; cc: $(${CC:-cc} --version | head -1)"
nccl_make=()
[ -n "${NCCL_HOME:-}" ] && nccl_make=(NCCL_HOME="$NCCL_HOME")

# ---- 2. Build -----------------------------------------------------------------------------------
jobs=${GPU_CHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}
test_bin=$build/bin/tests/kernels/test_cuda_ops
nccl_bin=$build/bin/tests/engine/test_comm_nccl
engine_bin=$build/bin/tests/engine/test_engine_cuda
train=$build/bin/moefold-train
moefold=$build/bin/moefold
t0=$(date +%s)
t=$(step_timeout 240 60)
if timeout "$t" make -j"$jobs" BUILD="$build" NVCC="$NVCC" WERROR=0 ${nccl_make[@]+"${nccl_make[@]}"} "$test_bin" "$nccl_bin" "$engine_bin" \
    "$train" "$moefold" >"$logdir/build.log" 2>&1; then
    record build ok $(($(date +%s) - t0)) "op tests, engine GPU tests, moefold, moefold-train"
else
    record build FAIL $(($(date +%s) - t0)) "make failed: see $logdir/build.log"
    tail -30 "$logdir/build.log"
    summary
    exit 1
fi

# ---- 3. CUDA vs CPU op tests ----------------------------------------------------------------
want ops && run_tests "cuda-vs-cpu op tests" "$test_bin" 120 20 0

# ---- 4. The engine's GPU tests (one GPU: every NCCL test runs on one rank) ------------------------
want nccl && run_tests "nccl vs mpi backend" "$nccl_bin" 60 10 0
# test_refused_without_gpu skips on a machine with a GPU, by design.
want engine && run_tests "engine cuda vs cpu" "$engine_bin" 180 30 1

# ---- 5. Training on the GPU: measured vs predicted ------------------------------------------------
tmp=$(mktemp -d)
cluster=$tmp/dgx-h200-1gpu.json
if command -v python3 >/dev/null 2>&1; then
    python3 - "$root/topologies/dgx-h200.json" "$cluster" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["name"] = "dgx-h200-1gpu"
c["description"] = "one GPU of a DGX H200 (derived from dgx-h200.json by scripts/gpu-check.sh)"
c["gpus_per_node"] = {"value": 1, "source": "gpu-check: a single-GPU run of dgx-h200"}
json.dump(c, open(sys.argv[2], "w"), indent=1)
EOF
fi

# train NAME STEPS CAP MIN MODEL_OPT MODEL_SPEC PREDICT_MODEL_FLAGS -- ENGINE_OPTS... -- FLAGS...
train_run() {
    local name=$1 steps=$2 cap=$3 min=$4 model=$5 pmodel=$6
    shift 6
    local eopts=() flags=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        eopts+=("$1")
        shift
    done
    shift
    flags=("$@")
    local t t0 rc run=$logdir/run-$name.json log=$logdir/train-$name.log
    t=$(step_timeout "$cap" "$min")
    if [ "$t" -eq 0 ]; then
        record "train $name" skipped 0 "time budget spent ($(elapsed) s)"
        return
    fi
    echo "[gpu-check] $train --model $model --backend cuda ${eopts[*]} --steps $steps -- ${flags[*]}"
    t0=$(date +%s)
    timeout "$t" "$train" --model "$model" --backend cuda ${eopts[@]+"${eopts[@]}"} \
        --steps "$steps" --synthetic --out "$run" --trace "$logdir/run-$name.trace.json" \
        -- "${flags[@]}" >"$log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] || grep -q "using the CPU backend" "$log" || ! grep -q '"cuda+nccl"' "$run"; then
        [ $rc -eq 124 ] && echo "timed out after $t s" >>"$log"
        record "train $name" FAIL $(($(date +%s) - t0)) "rc $rc: $(grep -v '^step' "$log" | tail -1)"
        tail -15 "$log"
        return
    fi
    record "train $name" ok $(($(date +%s) - t0)) "$(grep '^step' "$log" | tail -1)"
    # shellcheck disable=SC2086 # pmodel is "--model NAME" or "--model-config FILE"
    "$moefold" predict $pmodel --cluster "$cluster" --gpus 1 --fp32-training "${flags[@]}" \
        --emit "$logdir/plan-$name.json" --json >"$logdir/predict-$name.json" \
        2>"$logdir/predict-$name.log" ||
        echo "[gpu-check] moefold predict failed: $(tail -1 "$logdir/predict-$name.log")"
    # The run's traced step (CUDA events) beside the predicted one, phase by phase.
    t0=$(date +%s)
    if "$moefold" compare "$logdir/plan-$name.json" "$run" --cluster "$cluster" \
        --trace "$logdir/compare-$name.trace.json" >"$logdir/compare-$name.txt" 2>&1; then
        record "compare $name" ok $(($(date +%s) - t0)) "$(grep '^summary:' "$logdir/compare-$name.txt")"
        cat "$logdir/compare-$name.txt"
    else
        record "compare $name" FAIL $(($(date +%s) - t0)) "$(tail -1 "$logdir/compare-$name.txt")"
    fi
}

if ! want train; then
    : # not asked for (GPU_CHECK_ONLY)
elif [ ! -f "$cluster" ]; then
    record "train tiny-moe" skipped 0 "python3 missing (derives the 1-GPU cluster file and the table)"
else
    train_run tiny-moe 20 60 20 tiny-moe "--model tiny-moe" --gemm-math fp32 -- \
        --micro-batch-size 1 --global-batch-size 8 --seq-length 64 --moe-grouped-gemm
    train_run gpu-moe 8 150 60 tests/data/models/gpu-moe.json \
        "--model-config tests/data/models/gpu-moe.json" --gemm-math bf16 -- \
        --micro-batch-size 2 --global-batch-size 16 --seq-length 2048 --moe-grouped-gemm
    # The same with the optimizer offloaded (state in host memory, AdamW on the host's CPU).
    train_run gpu-moe-offload 4 150 60 tests/data/models/gpu-moe.json \
        "--model-config tests/data/models/gpu-moe.json" --gemm-math bf16 -- \
        --micro-batch-size 2 --global-batch-size 16 --seq-length 2048 --moe-grouped-gemm \
        --use-distributed-optimizer --optimizer-cpu-offload --use-precision-aware-optimizer
    # Predicted vs measured, and the MFU target of the larger model.
    python3 - "$logdir" "$cluster" >"$logdir/predicted-vs-measured.txt" <<'EOF'
import json, os, sys
logdir, cluster = sys.argv[1], sys.argv[2]
peak = json.load(open(cluster))["gpu"]["peak_tflops"]["bf16"]["value"] * 1e12
phases = ["compute", "expert_gemm", "dispatch", "combine", "optimizer", "host_overhead", "exposed_comm"]
out = ["", "# predicted (moefold predict, dgx-h200 with 1 GPU per node, --fp32-training) vs measured"
       " (moefold-train --backend cuda); MFU = model FLOPs / step time / BF16 dense peak %.1f TFLOPS"
       % (peak / 1e12)]
for name in ["tiny-moe", "gpu-moe"]:
    rp, pp = os.path.join(logdir, "run-%s.json" % name), os.path.join(logdir, "predict-%s.json" % name)
    if not (os.path.exists(rp) and os.path.exists(pp)):
        continue
    run, pred = json.load(open(rp)), json.load(open(pp))
    flops = pred["flops_per_step"]
    mt, pt = run["step_time_s"], pred["step_time_s"]
    mfu = flops / mt / peak if mt > 0 else 0.0
    dev = run.get("device", {})
    out.append("%-9s %-26s %12s %12s %9s" % (name, "", "predicted", "measured", "meas/pred"))
    rows = [("step time (ms)", pt * 1e3, mt * 1e3),
            ("tokens/s", pred["tokens_per_s_per_gpu"], run["tokens_per_s"]),
            ("TFLOPS (model FLOPs)", flops / pt / 1e12, flops / mt / 1e12),
            ("MFU (% of BF16 peak)", 100 * pred["mfu"], 100 * mfu)]
    rows += [("  %s (ms)" % p, pred["time_s"].get(p, 0) * 1e3, run["time_s"].get(p, 0) * 1e3)
             for p in phases]
    rows += [("memory: engine total (GiB)", pred["memory_gib"]["total"], run["memory_gib"]["total"])]
    rows += [("  %s (GiB)" % k, pred["memory_gib"][k], run["memory_gib"][k])
             for k in ["weights", "grads", "optimizer", "activations", "buffers"]]
    for label, p, m in rows:
        ratio = "%9.2f" % (m / p) if p > 0 else "%9s" % "-"
        out.append("%-9s %-26s %12.3f %12.3f %s" % ("", label, p, m, ratio))
    out.append("%-9s %-26s %12s %12.3f   (cudaMemGetInfo: %s)" % (
        "", "device memory used (GiB)", "-", dev.get("memory_used_gib", 0.0), dev.get("name", "?")))
    losses = [s["loss"] for s in run["per_step"]]
    out.append("%-9s loss %.4f -> %.4f over %d steps, gemm math %s" % (
        "", losses[0], losses[-1], len(losses), dev.get("gemm_math", "?")))
    if name == "gpu-moe":
        open(os.path.join(logdir, "mfu-gpu-moe.txt"), "w").write("%.4f\n" % mfu)
print("\n".join(out))
EOF
    cat "$logdir/predicted-vs-measured.txt"
    if [ -f "$logdir/mfu-gpu-moe.txt" ]; then
        mfu=$(cat "$logdir/mfu-gpu-moe.txt")
        if python3 -c "import sys; sys.exit(0 if float('$mfu') >= 0.40 else 1)"; then
            record "MFU target gpu-moe" ok 0 "MFU $mfu of the BF16 dense peak (target >= 0.40)"
        else
            record "MFU target gpu-moe" MISS 0 "MFU $mfu of the BF16 dense peak (target >= 0.40)"
        fi
    fi
fi
rm -rf "$tmp"

# ---- 6. Grouped expert GEMM vs dense BF16 GEMM ----------------------------------------------
t=$(step_timeout 90 20)
if ! want bench; then
    :
elif [ "$t" -eq 0 ]; then
    record "grouped GEMM bench" skipped 0 "time budget spent ($(elapsed) s)"
else
    t0=$(date +%s)
    timeout "$t" "$test_bin" --bench >"$logdir/bench.log" 2>&1
    rc=$?
    cat "$logdir/bench.log"
    ratios=$(awk '!/^#/ && NF >= 12 {printf "%s%s", sep, $10; sep=" "}' "$logdir/bench.log")
    case $rc in
    0) record "grouped GEMM bench" ok $(($(date +%s) - t0)) "grouped/dense: $ratios (target >= 70%)" ;;
    1) record "grouped GEMM bench" MISS $(($(date +%s) - t0)) "below 70% of dense: $ratios" ;;
    *) record "grouped GEMM bench" FAIL $(($(date +%s) - t0)) "rc $rc (log: bench.log)" ;;
    esac
fi

# ---- 7. compute-sanitizer (as time allows) ---------------------------------------------------
for tool in memcheck racecheck synccheck; do
    want sanitizer || continue
    if [ -z "$sanitizer" ]; then
        record "sanitizer $tool" skipped 0 "compute-sanitizer not found next to nvcc or on PATH"
        continue
    fi
    t=$(step_timeout 120 30)
    if [ "$t" -eq 0 ]; then
        record "sanitizer $tool" skipped 0 "time budget spent ($(elapsed) s)"
        continue
    fi
    t0=$(date +%s)
    timeout "$t" "$sanitizer" --tool "$tool" --error-exitcode 99 "$test_bin" \
        >"$logdir/sanitizer-$tool.log" 2>&1
    rc=$?
    summary_line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$logdir/sanitizer-$tool.log" | tail -1)
    if [ $rc -eq 0 ]; then
        record "sanitizer $tool" ok $(($(date +%s) - t0)) "${summary_line:-clean}"
    elif [ $rc -eq 124 ]; then
        record "sanitizer $tool" skipped $(($(date +%s) - t0)) "did not finish in $t s (budget)"
    else
        record "sanitizer $tool" FAIL $(($(date +%s) - t0)) "rc $rc: ${summary_line:-see sanitizer-$tool.log}"
        grep -E "=========" "$logdir/sanitizer-$tool.log" | head -30
    fi
done

# ---- 8. Where the step's GPU time goes (GPU_CHECK_PROFILE=1; as time allows) ----------------
if [ "${GPU_CHECK_PROFILE:-0}" = 1 ] || [[ ",${GPU_CHECK_ONLY:-}," == *,profile,* ]]; then
    t=$(step_timeout 120 20)
    if [ "$t" -eq 0 ]; then
        record "profile gpu-moe" skipped 0 "time budget spent ($(elapsed) s)"
    else
        t0=$(date +%s)
        if GPU_PROFILE_DIR=$logdir/profile timeout "$t" scripts/gpu-profile.sh "$build" \
            >"$logdir/profile.txt" 2>&1; then
            record "profile gpu-moe" ok $(($(date +%s) - t0)) "table: $logdir/profile.txt"
        else
            record "profile gpu-moe" FAIL $(($(date +%s) - t0)) "$(tail -1 "$logdir/profile.txt")"
        fi
    fi
fi

summary
[ -f "$logdir/profile.txt" ] && cat "$logdir/profile.txt"
exit $failed
