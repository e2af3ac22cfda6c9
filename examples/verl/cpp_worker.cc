// A C++ worker for the demo: reads one sub-task name per line on stdin, does
// a little real numeric work inside an NVTX range of that name (the official
// NVTX3 C API, nothing of rlscope), and answers "done <name>" on stdout.
#include <nvtx3/nvToolsExt.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

namespace {
// A small dense matrix product: n^3 multiply-adds.
double MatMul(int n) {
  std::vector<double> a(n * n), b(n * n), c(n * n, 0.0);
  for (int i = 0; i < n * n; ++i) a[i] = std::sin(i), b[i] = std::cos(i);
  nvtxRangePushA("matmul");
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < n; ++k)
      for (int j = 0; j < n; ++j) c[i * n + j] += a[i * n + k] * b[k * n + j];
  nvtxRangePop();
  return c[n + 1];
}
}  // namespace

int main() {
  std::string task;
  double sink = 0;
  while (std::getline(std::cin, task)) {
    if (task == "quit") break;
    nvtxRangePushA(task.c_str());
    sink += MatMul(task == "update_actor" || task == "update_critic" ? 160 : 90);
    nvtxRangePop();
    std::cout << "done " << task << std::endl;
  }
  return sink == 12345.0 ? 1 : 0;
}
