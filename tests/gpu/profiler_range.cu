// A CUDA program for the capture_range: cudaProfilerApi check
// (run_gpu_checks.sh). It knows nothing of rlscope: NVTX3 headers and the CUDA
// runtime only. Four controller steps (NVTX ranges named "step" with the step
// number as payload), each holding one range named after where it runs:
//   step 1 "before_window"  | cudaProfilerStart()
//   step 2 "in_window"      |
//   step 3 "in_window"      | cudaProfilerStop()
//   step 4 "after_window"
// Kernels run in every step and before the first one, so CUDA is initialised
// (and the injection called) before the window opens. Steps are 100 ms apart,
// more than the aggregator's flush.window_slack_ms, so each step's trace
// holds only its own ranges.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

__global__ void Busy(float* x, int n, int rounds) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  for (int r = 0; r < rounds; ++r) v = v * 0.999f + 0.001f;
  x[i] = v;
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "profiler_range: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void Launch(float* d, int n) {
  Busy<<<(n + 255) / 256, 256>>>(d, n, 2000);
  Check(cudaGetLastError(), "launch");
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void Step(int64_t number, const char* where, float* d, int n) {
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  nvtxEventAttributes_t a = {};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = "step";
  a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  a.payload.llValue = number;
  nvtxRangePushEx(&a);
  nvtxRangePushA(where);
  Launch(d, n);
  Launch(d, n);
  nvtxRangePop();
  nvtxRangePop();
}

}  // namespace

int main() {
  const int n = 1 << 20;
  float* d = nullptr;
  Check(cudaMalloc(&d, n * sizeof(float)), "cudaMalloc");
  Check(cudaMemset(d, 0, n * sizeof(float)), "cudaMemset");
  Launch(d, n);
  Step(1, "before_window", d, n);
  Check(cudaProfilerStart(), "cudaProfilerStart");
  Step(2, "in_window", d, n);
  Step(3, "in_window", d, n);
  Check(cudaProfilerStop(), "cudaProfilerStop");
  Step(4, "after_window", d, n);
  Launch(d, n);
  Check(cudaFree(d), "cudaFree");
  std::printf("profiler_range: done\n");
  return 0;
}
