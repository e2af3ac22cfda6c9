"""A Python worker for the demo, annotated only with the `nvtx` package (as
verl's workers are): one sub-task name per stdin line, a little real numeric
work inside an NVTX range of that name, "done <name>" on stdout."""
import math
import sys

import nvtx


def work(n: int) -> float:
    with nvtx.annotate("compute", domain="demo"):
        acc = 0.0
        for i in range(n):
            acc += math.sin(i) * math.cos(i * 0.5)
        return acc


SIZES = {"gen": 60000, "update_actor": 90000, "update_critic": 70000}

for line in sys.stdin:
    task = line.strip()
    if task == "quit":
        break
    with nvtx.annotate(task):
        work(SIZES.get(task, 25000))
    print(f"done {task}", flush=True)
