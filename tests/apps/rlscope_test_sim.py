"""A stand-in for an environment's simulator written in Python: the module the
attribution tests name as the simulator in the config. Pure Python arithmetic
(small ints: no allocation in libc), the clock read every 2,000 iterations."""
import time


def step(cpu_seconds: float) -> float:
    start = time.thread_time()
    x, now = 1, start
    while now - start < cpu_seconds:
        for _ in range(2000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        now = time.thread_time()
    return now - start
