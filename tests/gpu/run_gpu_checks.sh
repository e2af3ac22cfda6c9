#!/usr/bin/env bash
# GPU checks, run from the prebuilt bundle that scripts/build_gpu_bundle.sh
# (`make gpu-bundle`) makes, with no build or install step:
#
#   build/gpu-bundle/run_gpu_checks.sh [--work DIR]   the bundle's own folder
#   tests/gpu/run_gpu_checks.sh [--work DIR]          from the repo: build/gpu-bundle
#
# The machine needs bash, coreutils, grep, sed, ldd, python3 (standard library;
# torch for the PyTorch check) and, for the GPU checks, an NVIDIA GPU with its
# driver; no compiler, CUDA toolkit, -dev package, libzmq or yaml-cpp. Logs and
# traces go to DIR (default: gpu-checks beside the bundle folder), emptied first.
#
# Checks that need no GPU, proving the bundle is usable on this machine:
#   - every file in bin/ and lib/ resolves each shared library it needs, from
#     the bundle, or from the system when it is glibc's, libstdc++ or libgcc_s;
#   - the bundled aggregator starts and writes its endpoint file;
#   - nvtx_app (NVTX3 only) as the controller under the bundled collector
#     (NVTX_INJECTION64_PATH): its steps 1-3 are written by that aggregator;
#   - gpu_activity_test's conversion tests: hand-built CUPTI buffers walked by
#     the bundled libcupti (a skip counts as a failure).
# Checks that need a GPU (each a SKIP line, with the reason, when nvidia-smi is
# missing or fails):
#   1. collector_test with a driver (InitializeInjection really subscribes);
#   2. tests/gpu/profiler_range.cu under the collector (NVTX and CUDA
#      injection) as the controller with `capture_range: cudaProfilerApi` and a
#      real aggregator: every step is written (as with the other triggers),
#      and only steps 2 and 3 (inside cudaProfilerStart/Stop) hold the
#      "in_window" ranges and kernels; nothing before or after the window;
#   3. the same without CUDA_INJECTION64_PATH: the trigger never runs, the
#      capture stays closed: the steps hold their "step" ranges only;
#   4. gpu_activity_test with a driver;
#   5. tests/gpu/gpu_activity.cu (kernels, HtoD/DtoH copies, a memset, a stream
#      sync inside NVTX "step" ranges) as the controller with the gpu kinds on,
#      checked by check_gpu_trace.py: kernel slices on "stream ..." tracks,
#      memcpy and memset slices, cudaLaunchKernel API slices (cat cuda_api),
#      launch flows (ph s/f, cat launch) from the launching thread to the
#      kernel's stream, and run.json labelling the process gpu_tracing "on";
#   6. the same for torch_activity.py when python3's torch sees CUDA (SKIP
#      otherwise);
#   7. informational, never a failure: host-side ns per kernel launch with and
#      without the collector (gpu_activity --bench, median of 5 runs each),
#      printed as an INFO line and saved as DIR/launch_overhead.json.
# Output: one PASS:/FAIL:/SKIP: line per check, INFO: lines for the bundle
# used, the launch overhead and the totals. Exit 1 if any check FAILed, else 0
# (also when the GPU checks SKIP). Exit 2 when there is no bundle.
#
# The collector loads the bundle's libcupti (RLSCOPE_CUPTI_LIBRARY, unless it
# is set already).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ -x $HERE/bin/rlscope-ray-aggregator ]]; then
  BUNDLE=$HERE
else
  BUNDLE=$(cd "$HERE/../.." && pwd)/build/gpu-bundle
  if [[ ! -x $BUNDLE/bin/rlscope-ray-aggregator ]]; then
    echo "FAIL: no GPU check bundle at $BUNDLE; run 'make gpu-bundle' (scripts/build_gpu_bundle.sh) first"
    exit 2
  fi
fi
WORK=$(dirname "$BUNDLE")/gpu-checks
while (($# > 0)); do
  case $1 in
    --work) WORK=$2; shift 2 ;;
    *) echo "usage: $0 [--work DIR]" >&2; exit 2 ;;
  esac
done
BIN=$BUNDLE/bin
COLLECTOR=$BUNDLE/lib/librlscope_collector.so
AGGREGATOR=$BIN/rlscope-ray-aggregator
CUPTI=""
for c in "$BUNDLE"/lib/libcupti.so.*; do [[ -f $c ]] && CUPTI=$c && break; done
export RLSCOPE_CUPTI_LIBRARY=${RLSCOPE_CUPTI_LIBRARY:-$CUPTI}
# DIR is emptied: never the bundle or a folder holding it.
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
if [[ $(realpath "$BUNDLE")/ == "$(realpath "$WORK")"/* ]]; then
  echo "FAIL: --work $WORK holds the bundle $BUNDLE; name another folder"
  exit 2
fi
rm -rf "${WORK:?}"/*

failures=0 passes=0 skips=0
pass() { echo "PASS: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
skip() { echo "SKIP: $1"; skips=$((skips + 1)); }
echo "INFO: bundle $BUNDLE ($(tr '\n' ' ' <"$BUNDLE/BUNDLE_INFO" 2>/dev/null | sed 's/ $//'))"

# ---------------------------------------------------------------------------
# No GPU needed.

# is_system_lib: what the bundle leaves out and may come from the system.
source "$BUNDLE/system_libs.sh"
resolve_problems=()
nfiles=0
bundle_real=$(realpath "$BUNDLE")
for f in "$BIN"/* "$BUNDLE"/lib/*; do
  nfiles=$((nfiles + 1))
  if ! ldd_out=$(ldd "$f" 2>&1); then
    resolve_problems+=("$(basename "$f"): ldd failed: $(head -1 <<<"$ldd_out")")
    continue
  fi
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    if [[ $path == "not" ]]; then
      resolve_problems+=("$(basename "$f"): $name not found")
    elif ! is_system_lib "$name" && [[ $(realpath "$path") != "$bundle_real"/* ]]; then
      resolve_problems+=("$(basename "$f"): $name from $path, outside the bundle")
    fi
  done <<<"$ldd_out"
done
printf '%s\n' "${resolve_problems[@]}" >"$WORK/ldd_problems.log"
if ((${#resolve_problems[@]} == 0)); then
  pass "bundled files resolve their shared libraries ($nfiles files in bin/ and lib/)"
else
  fail "bundled files resolve their shared libraries: ${resolve_problems[0]} (all in $WORK/ldd_problems.log)"
fi

# start_aggregator DIR: a fresh aggregator writing DIR/out; sets AGG_PID and
# returns 1 if it exited or wrote no endpoint file within 10 s. The shell twin
# of rlscope_ray.aggregator_process: the bundle ships no Python package.
start_aggregator() {
  local dir=$1
  mkdir -p "$dir"
  "$AGGREGATOR" --listen 'tcp://127.0.0.1:*' --out "$dir/out" --endpoint-file "$dir/endpoint" \
    --grace-ms 2000 --exit-when-done >"$dir/aggregator.log" 2>&1 &
  AGG_PID=$!
  for _ in $(seq 100); do
    [[ -s $dir/endpoint ]] && return 0
    kill -0 "$AGG_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill "$AGG_PID" 2>/dev/null || true
  wait "$AGG_PID" 2>/dev/null || true
  return 1
}

# finish_aggregator: with --exit-when-done it exits once the controller said
# bye and its steps are written; after 30 s it is stopped.
finish_aggregator() {
  for _ in $(seq 300); do kill -0 "$AGG_PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$AGG_PID" 2>/dev/null; then kill -TERM "$AGG_PID"; fi
  wait "$AGG_PID" || true
}

dir=$WORK/nvtx_app
if start_aggregator "$dir"; then
  pass "aggregator starts and writes its endpoint file ($(cat "$dir/endpoint"))"
  rc=0
  env -u CUDA_INJECTION64_PATH -u RLSCOPE_DISABLE -u RLSCOPE_RANK -u RANK \
    RLSCOPE_AGGREGATOR="$(cat "$dir/endpoint")" RLSCOPE_ROLE=controller \
    RLSCOPE_CONFIG='{flush: {exit_timeout_ms: 5000}}' NVTX_INJECTION64_PATH="$COLLECTOR" \
    timeout 120 "$BIN/nvtx_app" --steps 3 --step-ms 5 --report "$dir/app.json" >"$dir/app.log" 2>&1 || rc=$?
  finish_aggregator
  if ((rc != 0)); then
    fail "CPU-only NVTX program under the bundled collector: nvtx_app exited $rc (logs in $dir)"
  elif msg=$(python3 - "$dir/out" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
steps = sorted(int(p.name[len("step_"):]) for p in out.glob("step_*") if (p / "trace.json").exists())
problems = [] if steps == [1, 2, 3] else [f"steps written {steps}, want [1, 2, 3]"]
for s in steps:
    events = json.loads((out / f"step_{s}" / "trace.json").read_text())["traceEvents"]
    names = [e["name"] for e in events if e.get("ph") == "X"]
    for want in ("outer", "inner", "helper_work"):
        if names.count(want) != 1:
            problems.append(f"step_{s} has {names.count(want)} '{want}' slices, want 1")
print("; ".join(problems) if problems else f"steps {steps} written, each with outer/inner/helper_work")
sys.exit(1 if problems else 0)
EOF
  ); then
    pass "CPU-only NVTX program under the bundled collector: $msg"
  else
    fail "CPU-only NVTX program under the bundled collector: $msg (logs in $dir)"
  fi
else
  fail "aggregator starts and writes its endpoint file: it exited or wrote none within 10 s ($(grep -m1 . "$dir/aggregator.log" || echo "no output"))"
  fail "CPU-only NVTX program under the bundled collector: no aggregator"
fi

# The tests that walk hand-built CUPTI buffers with the real libcupti.
CONVERSION_FILTER='GoldenBuffer.*:ConvertActivityBuffer.*:ActivityConverter.*'
log=$WORK/gpu_activity_test_conversion.log
if "$BIN/gpu_activity_test" --gtest_filter="$CONVERSION_FILTER" >"$log" 2>&1; then
  ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\{0,1\} from .* ran\..*/\1/p' "$log")
  if grep -q '^\[  SKIPPED \]' "$log"; then
    fail "gpu_activity_test conversion (no GPU): tests skipped: $(grep -m1 -A1 ': Skipped$' "$log" | tail -1) (see $log)"
  elif [[ -z $ran || $ran == 0 ]]; then
    fail "gpu_activity_test conversion (no GPU): no test ran (see $log)"
  else
    pass "gpu_activity_test conversion (no GPU): $ran tests, hand-built buffers walked by $(basename "$RLSCOPE_CUPTI_LIBRARY")"
  fi
else
  fail "gpu_activity_test conversion (no GPU): see $log"
fi

# ---------------------------------------------------------------------------
# GPU needed.

GPU_CHECKS=("collector_test (with a driver)" "cudaProfilerApi window"
            "without CUDA_INJECTION64_PATH the capture stays closed" "gpu_activity_test (with a driver)"
            "GPU activity (CUDA program)" "GPU activity (PyTorch)" "launch overhead (informational)")
no_gpu=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  no_gpu="nvidia-smi not found; needs an NVIDIA GPU and driver"
elif ! nvidia-smi >"$WORK/nvidia-smi.log" 2>&1; then
  no_gpu="nvidia-smi failed ($(grep -m1 . "$WORK/nvidia-smi.log" || echo "no output")); needs an NVIDIA GPU and driver"
fi
summary() {
  echo "INFO: $passes passed, $failures failed, $skips skipped; logs in $WORK"
  if ((failures > 0)); then exit 1; fi
  exit 0
}
if [[ -n $no_gpu ]]; then
  for check in "${GPU_CHECKS[@]}"; do skip "$check: $no_gpu"; done
  summary
fi

if "$BIN/collector_test" >"$WORK/collector_test.log" 2>&1; then
  pass "collector_test (with a driver)"
else
  fail "collector_test (with a driver): see $WORK/collector_test.log"
fi

# run_case NAME INJECT(0|1): profiler_range under the collector and a fresh
# aggregator; leaves $WORK/NAME/{out,aggregator.log,app.log}.
run_case() {
  local inject=$2 dir=$WORK/$1
  start_aggregator "$dir" || return 1
  local env=(RLSCOPE_AGGREGATOR="$(cat "$dir/endpoint")" RLSCOPE_ROLE=controller
             RLSCOPE_CONFIG='{capture_range: cudaProfilerApi, flush: {exit_timeout_ms: 5000}}'
             NVTX_INJECTION64_PATH="$COLLECTOR")
  if [[ $inject == 1 ]]; then env+=(CUDA_INJECTION64_PATH="$COLLECTOR"); fi
  local rc=0
  env -u CUDA_INJECTION64_PATH -u RLSCOPE_DISABLE "${env[@]}" timeout 120 "$BIN/profiler_range" \
    >"$dir/app.log" 2>&1 || rc=$?
  finish_aggregator
  return "$rc"
}

# check_steps DIR WINDOW_STEPS: what the step traces hold, against what the
# program did inside and outside the window. As with the other capture
# triggers (tests/test_capture.py: nvtx:<range>, api), every step the
# controller ran is written and its "step" range numbers it; the trigger
# decides what else is recorded: "in_window" in WINDOW_STEPS only, nothing
# recorded before or after the window.
check_steps() {
  python3 - "$1" "$2" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1]) / "out"
window = json.loads(sys.argv[2])
steps = sorted(int(p.name[len("step_"):]) for p in out.glob("step_*") if (p / "trace.json").exists())
names, kernels = {}, {}
for s in steps:
    events = json.loads((out / f"step_{s}" / "trace.json").read_text())["traceEvents"]
    names[s] = sorted(e["name"] for e in events if e.get("ph") in ("X", "b", "i"))
    kernels[s] = sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "gpu")
problems = []
if steps != [1, 2, 3, 4]:
    problems.append(f"steps written {steps}, want [1, 2, 3, 4] (the controller ran four)")
for s, n in names.items():
    want = 1 if s in window else 0
    if n.count("in_window") != want:
        problems.append(f"step_{s} has {n.count('in_window')} 'in_window' ranges, want {want}")
    # Two kernels a step (profiler_range.cu), traced only inside the window.
    if kernels[s] != 2 * want:
        problems.append(f"step_{s} has {kernels[s]} kernel slices, want {2 * want}")
    if n.count("step") != 1:
        problems.append(f"step_{s} has {n.count('step')} 'step' ranges, want 1")
    for outside in ("before_window", "after_window"):
        if outside in n:
            problems.append(f"step_{s} holds '{outside}', recorded outside the window")
summary = {s: sorted(set(n) & {"in_window", "before_window", "after_window"}) for s, n in names.items()}
print("; ".join(problems) if problems else f"steps {steps}, ranges recorded besides 'step': {summary}, "
      f"kernel slices: {kernels}")
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
    fail "without CUDA_INJECTION64_PATH the capture stays closed: $msg (logs in $WORK/no_injection)"
  fi
else
  fail "without CUDA_INJECTION64_PATH the capture stays closed: the program or aggregator failed (logs in $WORK/no_injection)"
fi

if "$BIN/gpu_activity_test" >"$WORK/gpu_activity_test.log" 2>&1; then
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
  start_aggregator "$dir" || return 1
  local rc=0
  env -u RLSCOPE_DISABLE RLSCOPE_AGGREGATOR="$(cat "$dir/endpoint")" RLSCOPE_ROLE=controller \
    RLSCOPE_CONFIG="$GPU_CONFIG" NVTX_INJECTION64_PATH="$COLLECTOR" CUDA_INJECTION64_PATH="$COLLECTOR" \
    timeout 300 "$@" >"$dir/app.log" 2>&1 || rc=$?
  finish_aggregator
  return "$rc"
}

if run_app activity "$BIN/gpu_activity"; then
  if grep -q "GPU tracing is unavailable" "$WORK/activity/app.log"; then
    fail "GPU activity (CUDA program): $(grep 'GPU tracing is unavailable' "$WORK/activity/app.log")"
  elif msg=$(python3 "$HERE/check_gpu_trace.py" "$WORK/activity/out" --kernel Busy \
               --need memcpy,memset,sync); then
    pass "GPU activity (CUDA program): $msg"
  else
    fail "GPU activity (CUDA program): $msg (logs in $WORK/activity)"
  fi
else
  fail "GPU activity (CUDA program): the program or aggregator failed (logs in $WORK/activity)"
fi

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  if run_app torch python3 "$HERE/torch_activity.py"; then
    if grep -q "GPU tracing is unavailable" "$WORK/torch/app.log"; then
      fail "GPU activity (PyTorch): $(grep 'GPU tracing is unavailable' "$WORK/torch/app.log")"
    elif msg=$(python3 "$HERE/check_gpu_trace.py" "$WORK/torch/out" --need memcpy,memory); then
      pass "GPU activity (PyTorch): $msg"
    else
      fail "GPU activity (PyTorch): $msg (logs in $WORK/torch)"
    fi
  else
    fail "GPU activity (PyTorch): the script or aggregator failed (logs in $WORK/torch)"
  fi
else
  skip "GPU activity (PyTorch): torch with CUDA is not importable by python3"
fi

# Launch overhead: the median of 5 runs each, without and with the collector.
bench_median() {
  local vals=()
  for _ in 1 2 3 4 5; do
    vals+=("$("$@" 2>>"$WORK/launch_overhead.log" |
              python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["ns_per_launch"])')")
  done
  printf '%s\n' "${vals[@]}" | sort -g | sed -n 3p
}
# The traced runs ship to an endpoint nobody listens on (sends are dropped):
# CUPTI, the buffer callbacks and conversion cost the same. What they leave
# on disk at exit goes to DIR/spool, their lines to DIR/launch_overhead.log.
LAUNCHES=20000
if base=$(bench_median "$BIN/gpu_activity" --bench $LAUNCHES) &&
   traced=$(bench_median env -u RLSCOPE_DISABLE RLSCOPE_AGGREGATOR=tcp://127.0.0.1:1 \
              RLSCOPE_ROLE=controller RLSCOPE_SPOOL_DIR="$WORK/spool" \
              RLSCOPE_CONFIG="{gpu: {kernels: true, memcpy: true, memset: true, runtime_api: true, sync: true}, flush: {exit_timeout_ms: 0}}" \
              NVTX_INJECTION64_PATH="$COLLECTOR" CUDA_INJECTION64_PATH="$COLLECTOR" \
              "$BIN/gpu_activity" --bench $LAUNCHES) &&
   [[ -n $base && -n $traced ]]; then
  added=$(python3 -c "print(f'{$traced - $base:.1f}')")
  echo "{\"bench\": \"launch_overhead\", \"launches\": $LAUNCHES, \"ns_per_launch_plain\": $base, \"ns_per_launch_traced\": $traced, \"ns_added_per_launch\": $added}" \
    | tee "$WORK/launch_overhead.json" | sed 's/^/INFO: /'
else
  echo "INFO: launch overhead not measured (gpu_activity --bench failed)"
fi

summary
