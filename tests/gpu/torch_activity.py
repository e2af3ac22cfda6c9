"""PyTorch variant of gpu_activity.cu for run_gpu_checks.sh: three controller
steps (torch.cuda.nvtx "step" ranges, numbered 1, 2, 3 by the aggregator),
each with an HtoD copy, a matmul, an elementwise op, a synchronize and a DtoH
copy. Knows nothing of rlscope."""
import time

import torch

assert torch.cuda.is_available(), "no CUDA device"
dev = torch.device("cuda")
x_host = torch.randn(1024, 1024).pin_memory()
w = torch.randn(1024, 1024, device=dev)
torch.cuda.synchronize()  # CUDA initialised before the first step
for _ in range(3):
    time.sleep(0.1)
    torch.cuda.nvtx.range_push("step")
    x = x_host.to(dev, non_blocking=True)
    y = torch.relu(x @ w)
    y.zero_()
    torch.cuda.synchronize()
    _ = y.cpu()
    torch.cuda.nvtx.range_pop()
print("torch_activity: done")
