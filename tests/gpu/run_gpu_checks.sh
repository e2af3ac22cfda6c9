#!/usr/bin/env bash
# GPU checks for the `capture_range: cudaProfilerApi` trigger. Needs an NVIDIA
# GPU, its driver and the CUDA toolkit (nvcc); run from anywhere:
#
#   tests/gpu/run_gpu_checks.sh        (logs and traces in build-gpu/gpu-checks)
#
# Builds the project in build-gpu, runs collector_test there (with a driver,
# InitializeInjection really subscribes), then runs tests/gpu/profiler_range.cu
# under the collector (NVTX_INJECTION64_PATH and CUDA_INJECTION64_PATH) as the
# controller, with a real aggregator, and checks the step traces:
#   1. with CUDA injection, only steps 2 and 3 (inside cudaProfilerStart/Stop)
#      are written, and only the "in_window" ranges appear;
#   2. without CUDA injection the trigger never runs, the capture stays
#      closed and no step is written.
# Then GPU activity tracing (collector/gpu_activity.cc): gpu_activity_test
# with a driver, and tests/gpu/gpu_activity.cu (kernels, HtoD/DtoH copies, a
# memset, a stream sync inside NVTX "step" ranges) as the controller with the
# gpu kinds on, checked by check_gpu_trace.py:
#   3. the step traces hold kernel slices on "stream ..." tracks, memcpy and
#      memset slices, cudaLaunchKernel API slices (cat cuda_api), launch flows
#      (ph s/f, cat launch) from the launching thread to the kernel's stream,
#      and run.json labels the process gpu_tracing "on";
#   4. the same for tests/gpu/torch_activity.py when torch with CUDA imports
#      (SKIP otherwise);
#   5. the host-side cost of a kernel launch with and without the collector
#      (gpu_activity --bench), printed as INFO, with a JSON line in
#      $WORK/launch_overhead.json. Informational, not a pass/fail check.
# Prints one PASS/FAIL line per check; exits 1 if any failed.
set -euo pipefail

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "SKIP: nvidia-smi not found; these checks need an NVIDIA GPU and driver"
  exit 0
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
BUILD=build-gpu
WORK=$BUILD/gpu-checks
rm -rf "$WORK"
mkdir -p "$WORK"

GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
cmake -S . -B "$BUILD" "${GEN[@]}" -DRLSCOPE_BUILD_TESTS=ON -DRLSCOPE_BUILD_PYTHON=OFF >"$WORK/cmake.log" 2>&1 ||
  { echo "FAIL: cmake configure (see $WORK/cmake.log)"; exit 1; }
grep -q "GPU triggers on" "$WORK/cmake.log" || { echo "FAIL: CUPTI headers not found (see $WORK/cmake.log)"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" --target rlscope_collector rlscope-ray-aggregator collector_test \
  gpu_activity_test \
  >"$WORK/build.log" 2>&1 || { echo "FAIL: build (see $WORK/build.log)"; exit 1; }
"$NVCC" -O2 -o "$WORK/profiler_range" tests/gpu/profiler_range.cu -ldl >"$WORK/nvcc.log" 2>&1 ||
  { echo "FAIL: nvcc tests/gpu/profiler_range.cu (see $WORK/nvcc.log)"; exit 1; }
"$NVCC" -O2 -o "$WORK/gpu_activity" tests/gpu/gpu_activity.cu -ldl >"$WORK/nvcc_activity.log" 2>&1 ||
  { echo "FAIL: nvcc tests/gpu/gpu_activity.cu (see $WORK/nvcc_activity.log)"; exit 1; }

COLLECTOR=$ROOT/$BUILD/collector/librlscope_collector.so
AGGREGATOR=$ROOT/$BUILD/aggregator/rlscope-ray-aggregator
failures=0
pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

if "$BUILD/tests/cpp/collector_test" >"$WORK/collector_test.log" 2>&1; then
  pass "collector_test (with a driver)"
else
  fail "collector_test (with a driver): see $WORK/collector_test.log"
fi

# run_case NAME INJECT(0|1): the program under the collector and a fresh
# aggregator; leaves $WORK/NAME/{out,aggregator.log,app.log}.
run_case() {
  local inject=$2 dir=$WORK/$1
  mkdir -p "$dir"
  "$AGGREGATOR" --listen 'tcp://127.0.0.1:*' --out "$dir/out" --endpoint-file "$dir/endpoint" \
    --grace-ms 2000 --exit-when-done >"$dir/aggregator.log" 2>&1 &
  local agg=$!
  for _ in $(seq 100); do [[ -s $dir/endpoint ]] && break; sleep 0.1; done
  [[ -s $dir/endpoint ]] || { kill "$agg" 2>/dev/null || true; return 1; }
  local env=(RLSCOPE_AGGREGATOR="$(cat "$dir/endpoint")" RLSCOPE_ROLE=controller
             RLSCOPE_CONFIG='{capture_range: cudaProfilerApi, flush: {exit_timeout_ms: 5000}}'
             NVTX_INJECTION64_PATH="$COLLECTOR")
  if [[ $inject == 1 ]]; then env+=(CUDA_INJECTION64_PATH="$COLLECTOR"); fi
  local rc=0
  env -u CUDA_INJECTION64_PATH -u RLSCOPE_DISABLE "${env[@]}" timeout 120 "$WORK/profiler_range" \
    >"$dir/app.log" 2>&1 || rc=$?
  # --exit-when-done: it exits once the controller said bye and its steps are written.
  for _ in $(seq 300); do kill -0 "$agg" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$agg" 2>/dev/null; then kill -TERM "$agg"; fi
  wait "$agg" || true
  return "$rc"
}

# check_steps DIR WANT_STEPS: what the step traces hold, against what the
# program did inside and outside the window.
check_steps() {
  python3 - "$1" "$2" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1]) / "out"
want = json.loads(sys.argv[2])
steps = sorted(int(p.name[len("step_"):]) for p in out.glob("step_*") if (p / "trace.json").exists())
names = {}
for s in steps:
    events = json.loads((out / f"step_{s}" / "trace.json").read_text())["traceEvents"]
    names[s] = sorted(e["name"] for e in events if e.get("ph") in ("X", "b", "i"))
problems = []
if steps != want:
    problems.append(f"steps written {steps}, want {want}")
for s, n in names.items():
    if n.count("in_window") != 1:
        problems.append(f"step_{s} has {n.count('in_window')} 'in_window' ranges, want 1")
    for outside in ("before_window", "after_window"):
        if outside in n:
            problems.append(f"step_{s} holds '{outside}', recorded outside the window")
print("; ".join(problems) if problems else f"steps {steps}: {names}")
sys.exit(1 if problems else 0)
EOF
}

if run_case window 1; then
  if grep -q "trigger is unavailable" "$WORK/window/app.log"; then
    fail "cudaProfilerApi window: $(grep 'trigger is unavailable' "$WORK/window/app.log")"
  elif msg=$(check_steps "$WORK/window" "[2, 3]"); then
    pass "cudaProfilerApi window: $msg"
  else
    fail "cudaProfilerApi window: $msg (logs in $WORK/window)"
  fi
else
  fail "cudaProfilerApi window: the program or aggregator failed (logs in $WORK/window)"
fi

if run_case no_injection 0; then
  if msg=$(check_steps "$WORK/no_injection" "[]"); then
    pass "without CUDA_INJECTION64_PATH the capture stays closed: $msg"
  else
    fail "without CUDA_INJECTION64_PATH: $msg (logs in $WORK/no_injection)"
  fi
else
  fail "without CUDA_INJECTION64_PATH: the program or aggregator failed (logs in $WORK/no_injection)"
fi

if "$BUILD/tests/cpp/gpu_activity_test" >"$WORK/gpu_activity_test.log" 2>&1; then
  pass "gpu_activity_test (with a driver): $(grep -o 'StartGpuTracing with the real libcupti: .*' "$WORK/gpu_activity_test.log" || true)"
else
  fail "gpu_activity_test (with a driver): see $WORK/gpu_activity_test.log"
fi

# The GPU kinds on, everything else default (capture_range controller: every
# step of the controller is a window).
GPU_CONFIG='{gpu: {kernels: true, memcpy: true, memset: true, runtime_api: true, sync: true}, flush: {exit_timeout_ms: 5000}}'

# run_app NAME COMMAND...: COMMAND as the controller under the collector (NVTX
# and CUDA injection) with GPU_CONFIG and a fresh aggregator; leaves
# $WORK/NAME/{out,aggregator.log,app.log}.
run_app() {
  local dir=$WORK/$1
  shift
  mkdir -p "$dir"
  "$AGGREGATOR" --listen 'tcp://127.0.0.1:*' --out "$dir/out" --endpoint-file "$dir/endpoint" \
    --grace-ms 2000 --exit-when-done >"$dir/aggregator.log" 2>&1 &
  local agg=$!
  for _ in $(seq 100); do [[ -s $dir/endpoint ]] && break; sleep 0.1; done
  [[ -s $dir/endpoint ]] || { kill "$agg" 2>/dev/null || true; return 1; }
  local rc=0
  env -u RLSCOPE_DISABLE RLSCOPE_AGGREGATOR="$(cat "$dir/endpoint")" RLSCOPE_ROLE=controller \
    RLSCOPE_CONFIG="$GPU_CONFIG" NVTX_INJECTION64_PATH="$COLLECTOR" CUDA_INJECTION64_PATH="$COLLECTOR" \
    timeout 300 "$@" >"$dir/app.log" 2>&1 || rc=$?
  for _ in $(seq 300); do kill -0 "$agg" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$agg" 2>/dev/null; then kill -TERM "$agg"; fi
  wait "$agg" || true
  return "$rc"
}

if run_app activity "$WORK/gpu_activity"; then
  if grep -q "GPU tracing is unavailable" "$WORK/activity/app.log"; then
    fail "GPU activity: $(grep 'GPU tracing is unavailable' "$WORK/activity/app.log")"
  elif msg=$(python3 tests/gpu/check_gpu_trace.py "$WORK/activity/out" --kernel Busy \
               --need memcpy,memset,sync); then
    pass "GPU activity (CUDA program): $msg"
  else
    fail "GPU activity (CUDA program): $msg (logs in $WORK/activity)"
  fi
else
  fail "GPU activity (CUDA program): the program or aggregator failed (logs in $WORK/activity)"
fi

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  if run_app torch python3 tests/gpu/torch_activity.py; then
    if grep -q "GPU tracing is unavailable" "$WORK/torch/app.log"; then
      fail "GPU activity (PyTorch): $(grep 'GPU tracing is unavailable' "$WORK/torch/app.log")"
    elif msg=$(python3 tests/gpu/check_gpu_trace.py "$WORK/torch/out" --need memcpy); then
      pass "GPU activity (PyTorch): $msg"
    else
      fail "GPU activity (PyTorch): $msg (logs in $WORK/torch)"
    fi
  else
    fail "GPU activity (PyTorch): the script or aggregator failed (logs in $WORK/torch)"
  fi
else
  echo "SKIP: GPU activity (PyTorch): torch with CUDA is not importable"
fi

# Launch overhead: the median of 5 runs each, without and with the collector.
bench_median() {
  local i vals=()
  for i in 1 2 3 4 5; do
    vals+=("$("$@" | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["ns_per_launch"])')")
  done
  printf '%s\n' "${vals[@]}" | sort -g | sed -n 3p
}
# The traced runs ship to an endpoint nobody listens on (sends are dropped):
# CUPTI, the buffer callbacks and conversion cost the same.
LAUNCHES=20000
if base=$(bench_median "$WORK/gpu_activity" --bench $LAUNCHES) &&
   traced=$(bench_median env -u RLSCOPE_DISABLE RLSCOPE_AGGREGATOR=tcp://127.0.0.1:1 \
              RLSCOPE_ROLE=controller \
              RLSCOPE_CONFIG="{gpu: {kernels: true, memcpy: true, memset: true, runtime_api: true, sync: true}, flush: {exit_timeout_ms: 0}}" \
              NVTX_INJECTION64_PATH="$COLLECTOR" CUDA_INJECTION64_PATH="$COLLECTOR" \
              "$WORK/gpu_activity" --bench $LAUNCHES) &&
   [[ -n $base && -n $traced ]]; then
  added=$(python3 -c "print(f'{$traced - $base:.1f}')")
  echo "{\"bench\": \"launch_overhead\", \"launches\": $LAUNCHES, \"ns_per_launch_plain\": $base, \"ns_per_launch_traced\": $traced, \"ns_added_per_launch\": $added}" \
    | tee "$WORK/launch_overhead.json" | sed 's/^/INFO: /'
else
  echo "INFO: launch overhead not measured (gpu_activity --bench failed)"
fi

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all GPU checks passed"
