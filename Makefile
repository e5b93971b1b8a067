# moefold — one non-recursive Makefile. Objects go to $(BUILD)/obj/<dir>/, binaries to $(BUILD)/bin/.
# Feature detection runs once here and prints a line per feature. Libraries come from pkg-config;
# a missing one stops the targets that need it, naming the Debian package to install.
#
# The README's two commands: `make demo` (main job) and `make test` (all tests). Both first run
# scripts/install-deps.sh, which apt-get installs whatever Debian packages are missing.

BUILD    ?= build
CC       ?= cc
WERROR   ?= 1
SAN      ?= 0
NVCC     ?= $(shell command -v nvcc 2>/dev/null)
CUDA_ARCH ?= 90

OBJ := $(BUILD)/obj
BIN := $(BUILD)/bin
LIBDIR := $(BUILD)/lib

# ---------------------------------------------------------------------------------------------
# Flags
CSTD_FLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L
# -fopenmp-simd: `#pragma omp simd` loops vectorise (no OpenMP runtime); -fno-math-errno: sqrtf and
# friends may become single instructions (nothing here reads errno after a math call).
CSTD_FLAGS += -fopenmp-simd -fno-math-errno
WARN_FLAGS := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wundef \
              -Wvla -Wdouble-promotion -Wcast-qual -Wpointer-arith
ifeq ($(WERROR),1)
WARN_FLAGS += -Werror
endif
ifeq ($(SAN),1)
OPT_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
SAN_LDFLAGS := -fsanitize=address,undefined
NO_CUDA := 1
else
OPT_FLAGS := -O2 -g
SAN_LDFLAGS :=
# Link-time optimisation of the cost model and the planner (the search's hot path): moefold and
# the benchmarks are linked with it; test binaries use the same objects' regular code (fat LTO
# objects), so their links stay fast. GCC only; bench_predict: about +10% predictions per second.
# NO_LTO=1 turns it off; so does a compiler whose LTO link fails (a wrapper without lto-wrapper,
# seen on a GPU machine's image), probed once (exported to recursive makes).
ifeq ($(origin NO_LTO),undefined)
NO_LTO := $(shell printf 'int main(void){return 0;}\n' | $(CC) -flto -x c - -o /dev/null >/dev/null 2>&1 && echo 0 || echo 1)
export NO_LTO
endif
ifneq ($(NO_LTO),1)
ifneq ($(shell $(CC) --version 2>/dev/null | grep -c 'Free Software Foundation'),0)
LTO_CFLAGS := -flto=auto -ffat-lto-objects
LTO_LDFLAGS := -flto=auto $(OPT_FLAGS)
AR := gcc-ar
endif
endif
endif
CPPFLAGS_BASE := -I. -MMD -MP
CFLAGS_ALL = $(CSTD_FLAGS) $(OPT_FLAGS) $(WARN_FLAGS) $(CPPFLAGS_BASE) $(FEATURE_DEFS) $(PKG_CFLAGS)

# ---------------------------------------------------------------------------------------------
# Feature detection (once). pkg_ok(name) is "y" when pkg-config knows the package.
pkg_ok = $(shell pkg-config --exists $(1) 2>/dev/null && echo y)
HAVE_GSL    := $(call pkg_ok,gsl)
HAVE_CJSON  := $(call pkg_ok,libcjson)
HAVE_HWLOC  := $(call pkg_ok,hwloc)
HAVE_BLAS   := $(call pkg_ok,openblas)
HAVE_CMOCKA := $(call pkg_ok,cmocka)
ifneq ($(NO_MPI),1)
MPI_PKG := $(if $(call pkg_ok,ompi-c),ompi-c,$(if $(call pkg_ok,mpi-c),mpi-c,))
ifneq ($(MPI_PKG),)
HAVE_MPI := y
MPI_CFLAGS := $(shell pkg-config --cflags $(MPI_PKG))
MPI_LIBS := $(shell pkg-config --libs $(MPI_PKG))
else ifneq ($(shell command -v mpicc 2>/dev/null),)
HAVE_MPI := y
MPI_CFLAGS := $(shell mpicc --showme:compile)
MPI_LIBS := $(shell mpicc --showme:link)
endif
endif

ifneq ($(NO_CUDA),1)
ifneq ($(NVCC),)
HAVE_CUDA := y
CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(NVCC)))
ifneq ($(NO_NCCL),1)
# NCCL: the toolkit's (CUDA_HOME/include/nccl.h) or the system's (libnccl-dev: /usr/include); set
# NCCL_HOME for another one (a folder with include/nccl.h and lib/ or lib64/ holding libnccl.so).
NCCL_HOME ?= $(firstword $(foreach d,$(CUDA_HOME) /usr,$(if $(wildcard $(d)/include/nccl.h),$(d))) $(CUDA_HOME))
HAVE_NCCL := $(if $(wildcard $(NCCL_HOME)/include/nccl.h),y,)
endif
endif
endif

GSL_CFLAGS   := $(if $(HAVE_GSL),$(shell pkg-config --cflags gsl))
GSL_LIBS     := $(if $(HAVE_GSL),$(shell pkg-config --libs gsl))
CJSON_CFLAGS := $(if $(HAVE_CJSON),$(shell pkg-config --cflags libcjson))
CJSON_LIBS   := $(if $(HAVE_CJSON),$(shell pkg-config --libs libcjson))
HWLOC_CFLAGS := $(if $(HAVE_HWLOC),$(shell pkg-config --cflags hwloc))
HWLOC_LIBS   := $(if $(HAVE_HWLOC),$(shell pkg-config --libs hwloc))
BLAS_CFLAGS  := $(if $(HAVE_BLAS),$(shell pkg-config --cflags openblas))
BLAS_LIBS    := $(if $(HAVE_BLAS),$(shell pkg-config --libs openblas))
CMOCKA_CFLAGS := $(if $(HAVE_CMOCKA),$(shell pkg-config --cflags cmocka))
CMOCKA_LIBS  := $(if $(HAVE_CMOCKA),$(shell pkg-config --libs cmocka))
PKG_CFLAGS := $(GSL_CFLAGS) $(CJSON_CFLAGS)

FEATURE_DEFS := $(if $(HAVE_CUDA),-DMOE_HAVE_CUDA=1) $(if $(HAVE_NCCL),-DMOE_HAVE_NCCL=1)

ifeq ($(MAKELEVEL),0)
ifeq ($(filter clean format format-check deps,$(MAKECMDGOALS)),)
feat = $(info $(if $(1),✓,✗) $(2))
$(call feat,$(HAVE_GSL),GSL (libgsl-dev))
$(call feat,$(HAVE_CJSON),cJSON (libcjson-dev))
$(call feat,$(HAVE_HWLOC),hwloc (libhwloc-dev))
$(call feat,$(HAVE_BLAS),OpenBLAS (libopenblas-dev))
$(call feat,$(HAVE_MPI),MPI (libopenmpi-dev openmpi-bin)$(if $(NO_MPI), [NO_MPI=1]))
$(call feat,$(HAVE_CMOCKA),cmocka (libcmocka-dev))
$(call feat,$(HAVE_CUDA),CUDA$(if $(HAVE_CUDA), ($(NVCC), sm_$(CUDA_ARCH)), [nvcc not found or NO_CUDA=1: GPU backend skipped]))
$(call feat,$(HAVE_NCCL),NCCL$(if $(HAVE_NCCL), ($(NCCL_HOME))))
endif
endif

# need(var,package): stop with the Debian package name when a library is missing.
need = $(if $(HAVE_$(1)),,$(error $(1) not found by pkg-config: install Debian package $(2) (or run scripts/install-deps.sh)))

# ---------------------------------------------------------------------------------------------
# Sources, discovered by directory. Files named *_main.c are program entry points.
MODEL_SRC    := $(wildcard model/*.c)
TOPO_SRC     := $(filter-out topologies/hwloc_%.c,$(wildcard topologies/*.c))
TOPOHW_SRC   := $(wildcard topologies/hwloc_*.c)
PLANNER_SRC  := $(wildcard planner/*.c)
KERNELS_SRC  := $(wildcard kernels/*.c kernels/cpu/*.c)
ENGINE_SRC   := $(filter-out %_main.c,$(wildcard engine/*.c))
CLI_SRC      := $(filter-out %_main.c,$(wildcard cli/*.c))
CUDA_SRC     := $(if $(HAVE_CUDA),$(wildcard kernels/cuda/*.cu engine/cuda/*.cu))
# kernels/kernels.c references the CUDA ops table only when kernels/cuda/ is built (and is rebuilt
# when that set changes, so the define never goes stale).
FEATURE_DEFS += $(if $(filter kernels/cuda/%,$(CUDA_SRC)),-DMOE_HAVE_CUDA_KERNELS=1)
TEST_UTIL_SRC := tests/test_util.c

objs = $(patsubst %.c,$(OBJ)/%.o,$(1))
LIB_MODEL   := $(LIBDIR)/libmoe_model.a
LIB_TOPO    := $(LIBDIR)/libmoe_topo.a
LIB_TOPOHW  := $(LIBDIR)/libmoe_topohw.a
LIB_PLANNER := $(LIBDIR)/libmoe_planner.a
LIB_KERNELS := $(LIBDIR)/libmoe_kernels.a
LIB_ENGINE  := $(LIBDIR)/libmoe_engine.a
LIB_CLI     := $(LIBDIR)/libmoe_cli.a
LIB_CUDA    := $(if $(CUDA_SRC),$(LIBDIR)/libmoe_cuda.a)

comma := ,
# A NCCL outside the toolkit and the system's folders adds its own library path (and rpath).
NCCL_EXTRA := $(if $(HAVE_NCCL),$(filter-out $(CUDA_HOME) /usr,$(NCCL_HOME)))
NCCL_LIBS := $(if $(NCCL_EXTRA),$(foreach l,lib64 lib,-L$(NCCL_EXTRA)/$(l) -Wl$(comma)-rpath$(comma)$(NCCL_EXTRA)/$(l))) \
             $(if $(HAVE_NCCL),-lnccl)
CUDA_LIBS := $(if $(LIB_CUDA),-L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -Wl$(comma)-rpath$(comma)$(CUDA_HOME)/lib64 \
             -Wl$(comma)-rpath$(comma)$(CUDA_HOME)/lib -lcublasLt -lcublas $(NCCL_LIBS) -lcudart -lstdc++)

# Link sets per layer (STYLE.md §1): planner side never sees MPI, hwloc, BLAS or CUDA.
LINK_MODEL   := $(LIB_MODEL) $(GSL_LIBS) -lm
LINK_PLANNER := $(LIB_CLI) $(LIB_PLANNER) $(LIB_TOPO) $(LIB_MODEL) $(CJSON_LIBS) $(GSL_LIBS) -lm
LINK_KERNELS := $(LIB_KERNELS) $(LIB_CUDA) $(LIB_MODEL) $(BLAS_LIBS) $(CUDA_LIBS) $(GSL_LIBS) -lm
LINK_ENGINE  := $(LIB_ENGINE) $(LIB_KERNELS) $(LIB_CUDA) $(LIB_TOPOHW) $(LIB_TOPO) $(LIB_MODEL) \
                $(MPI_LIBS) $(HWLOC_LIBS) $(BLAS_LIBS) $(CJSON_LIBS) $(CUDA_LIBS) $(GSL_LIBS) -lm

# ---------------------------------------------------------------------------------------------
.PHONY: all planner engine tests test test-run san bench demo validate fit deps clean format format-check \
        layers globals lint compile_commands headers refs
.DEFAULT_GOAL := all

all: planner $(if $(HAVE_MPI),engine) tests

planner: $(BIN)/moefold
ENGINE_BINS := $(patsubst engine/%_main.c,$(BIN)/moefold-%,$(wildcard engine/*_main.c))
engine: $(ENGINE_BINS)

$(OBJ)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(EXTRA_CFLAGS) -c $< -o $@

# Engine, kernels and topologies-hwloc objects also see MPI/BLAS/hwloc headers. Engine objects see
# the CUDA toolkit's C headers (cuda_runtime_api.h, nccl.h) as system headers when CUDA is built:
# the engine's device runtime and NCCL backend (engine/device.c, engine/comm_nccl.c) use them.
CUDA_CFLAGS := $(if $(HAVE_CUDA),-isystem $(CUDA_HOME)/include $(if $(NCCL_EXTRA),-isystem $(NCCL_EXTRA)/include))
$(call objs,$(ENGINE_SRC) $(wildcard engine/*_main.c)): EXTRA_CFLAGS = $(MPI_CFLAGS) $(HWLOC_CFLAGS) $(BLAS_CFLAGS) $(CUDA_CFLAGS)
$(call objs,$(KERNELS_SRC)): EXTRA_CFLAGS = $(BLAS_CFLAGS)
$(OBJ)/kernels/kernels.o: $(filter kernels/cuda/%,$(CUDA_SRC))
$(call objs,$(TOPOHW_SRC)): EXTRA_CFLAGS = $(HWLOC_CFLAGS)
$(call objs,$(MODEL_SRC) $(PLANNER_SRC)): EXTRA_CFLAGS = $(LTO_CFLAGS)

$(OBJ)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O2 -lineinfo -I. $(FEATURE_DEFS) \
	    -gencode arch=compute_$(CUDA_ARCH),code=sm_$(CUDA_ARCH) \
	    -gencode arch=compute_100,code=sm_100 -gencode arch=compute_100,code=compute_100 \
	    -Werror all-warnings -Xcompiler=-Wall,-Wextra -MMD -MP -c $< -o $@

define make_lib
$(1): $(call objs,$(2))
	@mkdir -p $$(dir $$@)
	@rm -f $$@
	$$(if $$^,$$(AR) rcs $$@ $$^,$$(AR) rcs $$@)
endef
$(eval $(call make_lib,$(LIB_MODEL),$(MODEL_SRC)))
$(eval $(call make_lib,$(LIB_TOPO),$(TOPO_SRC)))
$(eval $(call make_lib,$(LIB_TOPOHW),$(TOPOHW_SRC)))
$(eval $(call make_lib,$(LIB_PLANNER),$(PLANNER_SRC)))
$(eval $(call make_lib,$(LIB_KERNELS),$(KERNELS_SRC)))
$(eval $(call make_lib,$(LIB_ENGINE),$(ENGINE_SRC)))
$(eval $(call make_lib,$(LIB_CLI),$(CLI_SRC)))
$(LIB_CUDA): $(patsubst %.cu,$(OBJ)/%.o,$(CUDA_SRC))
	@mkdir -p $(dir $@)
	@rm -f $@
	$(AR) rcs $@ $^

$(BIN)/moefold: $(OBJ)/cli/moefold_main.o $(LIB_CLI) $(LIB_PLANNER) $(LIB_TOPO) $(LIB_MODEL)
	$(call need,GSL,libgsl-dev)$(call need,CJSON,libcjson-dev)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_LDFLAGS) $(LTO_LDFLAGS) -o $@ $< $(LINK_PLANNER)

$(BIN)/moefold-%: $(OBJ)/engine/%_main.o $(LIB_ENGINE) $(LIB_KERNELS) $(LIB_CUDA) $(LIB_TOPOHW) $(LIB_TOPO) $(LIB_MODEL)
	$(call need,MPI,libopenmpi-dev)$(call need,BLAS,libopenblas-dev)$(call need,HWLOC,libhwloc-dev)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_LDFLAGS) -o $@ $< $(LINK_ENGINE)

# ---------------------------------------------------------------------------------------------
# Tests: one cmocka binary per tests/<dir>/test_<module>.c, linked with its layer's libraries.
TEST_SRC := $(filter-out tests/bench/%,$(wildcard tests/*/test_*.c))
TEST_BIN := $(patsubst tests/%.c,$(BIN)/tests/%,$(TEST_SRC))
TEST_UTIL_OBJ := $(call objs,$(TEST_UTIL_SRC))
$(call objs,$(TEST_SRC) $(TEST_UTIL_SRC)): EXTRA_CFLAGS = $(CMOCKA_CFLAGS) $(MPI_CFLAGS) $(BLAS_CFLAGS) $(HWLOC_CFLAGS)

test_link = $(if $(filter model,$(1)),$(LINK_MODEL),$(if $(filter planner topologies cli,$(1)),$(LINK_PLANNER),$(if $(filter kernels,$(1)),$(LINK_KERNELS),$(LINK_ENGINE))))
test_deps = $(if $(filter model,$(1)),$(LIB_MODEL),$(if $(filter planner topologies cli,$(1)),$(LIB_CLI) $(LIB_PLANNER) $(LIB_TOPO) $(LIB_MODEL),$(if $(filter kernels,$(1)),$(LIB_KERNELS) $(LIB_CUDA) $(LIB_MODEL),$(LIB_ENGINE) $(LIB_KERNELS) $(LIB_CUDA) $(LIB_TOPOHW) $(LIB_TOPO) $(LIB_MODEL))))

define test_rule
$(BIN)/tests/$(1)/%: $(OBJ)/tests/$(1)/%.o $(TEST_UTIL_OBJ) $(call test_deps,$(1))
	$$(call need,CMOCKA,libcmocka-dev)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(SAN_LDFLAGS) -o $$@ $$< $(TEST_UTIL_OBJ) $(call test_link,$(1)) $$(CMOCKA_LIBS)
endef
$(foreach d,$(sort $(patsubst tests/%/,%,$(dir $(TEST_SRC)))),$(eval $(call test_rule,$(d))))

tests: $(TEST_BIN)

# Benchmarks: tests/bench/bench_<name>.c -> $(BIN)/bench/bench_<name>, linked with every layer.
# `make bench` runs each and prints its table (performance targets are checked here, never in tests).
BENCH_SRC := $(wildcard tests/bench/bench_*.c)
BENCH_BIN := $(patsubst tests/bench/%.c,$(BIN)/bench/%,$(BENCH_SRC))
$(call objs,$(BENCH_SRC)): EXTRA_CFLAGS = $(MPI_CFLAGS) $(BLAS_CFLAGS) $(HWLOC_CFLAGS)
$(BIN)/bench/%: $(OBJ)/tests/bench/%.o $(TEST_UTIL_OBJ) $(LIB_CLI) $(LIB_PLANNER) $(LIB_ENGINE) $(LIB_KERNELS) $(LIB_CUDA) $(LIB_TOPOHW) $(LIB_TOPO) $(LIB_MODEL)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_LDFLAGS) $(LTO_LDFLAGS) -o $@ $< $(TEST_UTIL_OBJ) $(LIB_CLI) $(LIB_PLANNER) $(LINK_ENGINE)

bench: deps
	@$(MAKE) --no-print-directory all $(BENCH_BIN)
	@scripts/run-bench.sh $(BUILD)

# The README's test command. Installs missing Debian packages, then builds and runs everything.
test: deps
	@$(MAKE) --no-print-directory test-run

# After the suites: the fuzz smoke run (seconds per parser) and the whole suite again under
# ASan+UBSan (make san; about 6 minutes of tests on 2 cores after its build; NO_SAN=1 skips it).
test-run: all
	@scripts/run-tests.sh $(BUILD)
	@$(MAKE) --no-print-directory fuzz-smoke
	@$(if $(filter 1,$(NO_SAN)),echo "san: skipped (NO_SAN=1)",$(MAKE) --no-print-directory san)
	@$(MAKE) --no-print-directory layers globals format-check

# Sanitizers: every test binary (2-rank MPI runs included) built with ASan+UBSan in build/san.
# fast_unwind_on_malloc=0: Open MPI's components are built without frame pointers and unloaded at
# MPI_Finalize, so the fast unwinder's one-frame stacks of their one-time allocations match no
# suppression; full stacks reach libmpi/libopen-pal/... frames that tests/lsan.supp names.
SAN_ENV = ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:detect_stack_use_after_return=1 \
          LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0 \
          UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# WERROR=0: at -O1 gcc warns where it does not at -O2 (e.g. -Wformat-truncation); the -O2 build
# keeps -Werror, this one is for the run-time checks.
san:
	@$(MAKE) --no-print-directory BUILD=build/san SAN=1 NO_CUDA=1 WERROR=0 all
	@$(SAN_ENV) scripts/run-tests.sh build/san

# The README's main job: installs missing packages, builds, then runs scripts/demo.sh.
demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh $(BUILD)

# The closed loop on this host: calibrate, then plan, run and compare a suite of small-MoE plans.
validate: deps
	@$(MAKE) --no-print-directory planner engine
	@scripts/validate.sh $(BUILD)

# The shipped cluster files' software figures, fitted to the shipped runs (moefold fit).
fit: deps
	@$(MAKE) --no-print-directory $(BIN)/moefold
	@scripts/fit-clusters.sh $(BUILD)

deps:
	@scripts/install-deps.sh

# ---------------------------------------------------------------------------------------------
# Hygiene: include layering, writable globals, formatting, static analysis.
layers:
	@scripts/check-layers.sh

globals: all
	@scripts/check-globals.sh $(OBJ)

FORMAT_FILES = $(shell git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null)
format:
	@clang-format -i $(FORMAT_FILES)
format-check:
	@clang-format --dry-run -Werror $(FORMAT_FILES) && echo "format-check: ok"

headers:
	@for h in $$(git ls-files 'model/*.h' 'planner/*.h' 'topologies/*.h' 'kernels/*.h'); do \
	    echo '#include "'$$h'"' | $(CC) $(CSTD_FLAGS) $(WARN_FLAGS) -I. $(PKG_CFLAGS) -x c -fsyntax-only - || exit 1; done; \
	    echo "headers: each compiles alone"

compile_commands:
	@$(MAKE) clean && bear -- $(MAKE) all

lint:
	@scripts/lint.sh

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# PyTorch reference files for tests/kernels/test_refs.c (needs PyTorch on CPU; CI never runs it).
refs:
	python3 scripts/gen_refs.py tests/data/refs

# ---------------------------------------------------------------------------------------------
# Fuzzing (tests/fuzz/fuzz_<parser>.c, libFuzzer): scripts/fuzz.sh builds every parser library
# again in build/fuzz with clang -fsanitize=fuzzer-no-link,address,undefined (FUZZ=1 below), links
# one target per parser with -fsanitize=fuzzer, seeds each from the real files and runs it with the
# leak check on, a per-input -timeout and an RSS limit. A target that finds a crash, a leak, a hang
# or a broken property (tests/fuzz/fuzz_util.h) fails the run and leaves its input under
# build/fuzz/artifacts/. Without clang's libFuzzer both targets print a skip note and succeed.
#   make fuzz        FUZZ_SECONDS per target (default 300; corpus kept in build/fuzz/corpus/)
#   make fuzz-smoke  FUZZ_SMOKE_SECONDS per target (default 2), part of `make test`
FUZZ_SECONDS ?= 300
FUZZ_SMOKE_SECONDS ?= 2
FUZZ_CC ?= clang
.PHONY: fuzz fuzz-smoke fuzz-bins

ifeq ($(FUZZ),1)
CC := $(FUZZ_CC)
OPT_FLAGS += -fsanitize=fuzzer-no-link
# clang defines INFINITY as a float constant, so `double x = INFINITY` warns under clang only;
# the gcc builds keep -Wdouble-promotion.
WARN_FLAGS += -Wno-double-promotion
endif

FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(patsubst tests/fuzz/%.c,$(BIN)/fuzz/%,$(FUZZ_SRC)) $(BIN)/fuzz/gen_seeds
$(BIN)/fuzz/gen_seeds: $(OBJ)/tests/fuzz/gen_seeds.o $(LIB_CLI) $(LIB_PLANNER) $(LIB_TOPO) $(LIB_MODEL)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_LDFLAGS) -o $@ $< $(LINK_PLANNER)
$(BIN)/fuzz/fuzz_%: $(OBJ)/tests/fuzz/fuzz_%.o $(LIB_CLI) $(LIB_PLANNER) $(LIB_TOPO) $(LIB_MODEL)
	@mkdir -p $(dir $@)
	$(CC) -fsanitize=fuzzer $(SAN_LDFLAGS) -o $@ $< $(LINK_PLANNER)
# Only meaningful with the variables scripts/fuzz.sh passes (BUILD=build/fuzz SAN=1 FUZZ=1).
fuzz-bins: $(FUZZ_BIN)

fuzz:
	@scripts/fuzz.sh $(FUZZ_SECONDS)
fuzz-smoke:
	@scripts/fuzz.sh --smoke $(FUZZ_SMOKE_SECONDS)

# ---------------------------------------------------------------------------------------------
# GPU checks (run them on a machine with an NVIDIA GPU; elsewhere the CUDA tests skip). `make
# test-gpu` builds and runs the CUDA-vs-CPU op tests (tests/kernels/test_cuda_*.c) and the engine's
# GPU tests (NCCL vs MPI backend, CUDA engine vs CPU engine); `make gpu-check` runs
# scripts/gpu-check.sh: build, those tests, moefold-train --backend cuda on tiny-moe and a larger
# single-GPU MoE against moefold predict (step, phases, memory, MFU), the grouped expert GEMM
# against dense BF16 (>= 70%), compute-sanitizer, and a summary table, in under 8 minutes.
CUDA_TEST_BIN := $(patsubst tests/%.c,$(BIN)/tests/%,$(wildcard tests/kernels/test_cuda_*.c)) \
                 $(BIN)/tests/engine/test_comm_nccl $(BIN)/tests/engine/test_engine_cuda
.PHONY: test-gpu gpu-check
test-gpu: $(CUDA_TEST_BIN)
	@for t in $(CUDA_TEST_BIN); do echo "== $$t"; $$t || exit 1; done
gpu-check:
	@scripts/gpu-check.sh $(BUILD)
