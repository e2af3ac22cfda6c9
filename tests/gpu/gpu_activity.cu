// A CUDA program for the GPU activity checks (run_gpu_checks.sh). It knows
// nothing of rlscope: NVTX3 headers and the CUDA runtime only.
//
//   gpu_activity              three controller steps (NVTX ranges named "step",
//                             payload = step number), each: an HtoD copy, a
//                             memset, two kernel launches on a created stream,
//                             a stream synchronize, a DtoH copy.
//   gpu_activity --bench N    one step holding N launches of an empty kernel
//                             (after a warm-up outside it); prints
//                             {"launches": N, "ns_per_launch": x} measured
//                             around the launch loop alone (host side).
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

__global__ void Busy(float* x, int n, int rounds) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  for (int r = 0; r < rounds; ++r) v = v * 0.999f + 0.001f;
  x[i] = v;
}

__global__ void Empty() {}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "gpu_activity: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void PushStep(int64_t number) {
  nvtxEventAttributes_t a = {};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = "step";
  a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  a.payload.llValue = number;
  nvtxRangePushEx(&a);
}

int Bench(int launches) {
  Empty<<<1, 32>>>();
  Check(cudaDeviceSynchronize(), "warm-up");
  for (int i = 0; i < 1000; ++i) Empty<<<1, 32>>>();
  Check(cudaDeviceSynchronize(), "warm-up");
  PushStep(1);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < launches; ++i) Empty<<<1, 32>>>();
  const auto t1 = std::chrono::steady_clock::now();
  Check(cudaGetLastError(), "launch");
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  nvtxRangePop();
  const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
  std::printf("{\"launches\": %d, \"ns_per_launch\": %.1f}\n", launches, ns / launches);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--bench") == 0) return Bench(std::atoi(argv[2]));
  const int n = 1 << 20;
  std::vector<float> host(n, 1.0f);
  float* d = nullptr;
  Check(cudaMalloc(&d, n * sizeof(float)), "cudaMalloc");
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  Busy<<<(n + 255) / 256, 256>>>(d, n, 10);  // CUDA initialised before the first step
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  for (int64_t step = 1; step <= 3; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    PushStep(step);
    nvtxRangePushA("work");
    Check(cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "HtoD");
    Check(cudaMemsetAsync(d, 0, n * sizeof(float), stream), "cudaMemsetAsync");
    Busy<<<(n + 255) / 256, 256, 0, stream>>>(d, n, 2000);
    Busy<<<(n + 255) / 256, 256, 0, stream>>>(d, n, 2000);
    Check(cudaGetLastError(), "launch");
    Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    Check(cudaMemcpy(host.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), "DtoH");
    nvtxRangePop();
    nvtxRangePop();
  }
  Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  Check(cudaFree(d), "cudaFree");
  std::printf("gpu_activity: done\n");
  return 0;
}
