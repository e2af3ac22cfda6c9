"""A program that churns Python frames and memory while the CPU sampler reads
its frames at a high rate (tests/test_sampler_safety.py, make bench section
sampler): the reader must never crash it, whatever it meets.

What it churns, over and over for --seconds of CPU time, in a capture
window (capture_range: api):
  - recursion that oscillates across a data-stack chunk boundary, and deep
    recursion unwound at once: CPython maps a chunk for the frames that do
    not fit and unmaps it when they return, so a frame the sampler finds as
    current may sit in memory unmapped a moment ago;
  - generators and coroutines suspended and resumed, exceptions raised
    through deep stacks;
  - threads started and ended, each sampled while it runs (their thread
    states, data stacks and sampler timers come and go);
  - large lists built and freed (CPython unmaps empty arenas) and
    gc.collect() over reference cycles.

Prints one JSON line: the rounds done, the chunk boundaries churned in the
last one, and the collector's counters (rlscope_ray.stats())."""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import sys
import threading
import time

import rlscope_ray


def leaf() -> int:
    # Its frame is larger than oscillate()'s (48 locals): at each chunk's
    # end there is a depth where oscillate()'s frame fits and this one does not.
    (
        a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18,
        a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31, a32, a33, a34, a35,
        a36, a37, a38, a39, a40, a41, a42, a43, a44, a45, a46, a47
    ) = range(48)
    return a47 - 46


def burning_leaf(cpu_s: float) -> int:
    # A frame as large as leaf()'s: it sits in the chunk leaf() would map,
    # which stays mapped while it burns.
    (
        a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18,
        a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31, a32, a33, a34, a35,
        a36, a37, a38, a39, a40, a41, a42, a43, a44, a45, a46, a47
    ) = range(48)
    return burn(cpu_s) + a47 - 47


def burn(cpu_s: float) -> int:
    start = time.thread_time()
    x = 0
    while time.thread_time() - start < cpu_s:
        for i in range(1000):
            x ^= i
    return x


def oscillate(depth: int, calls: int, hold_s: float = 0.0) -> int:
    # At some depths the next frame no longer fits its chunk: each leaf()
    # call there maps a chunk and unmaps it on return. burning_leaf() first
    # keeps that chunk mapped for hold_s of CPU, then leaf() maps it again at
    # the same address and unmaps it, over and over.
    if depth > 0:
        return oscillate(depth - 1, calls, hold_s)
    total = burning_leaf(hold_s) if hold_s > 0 else 0
    for _ in range(calls):
        total += leaf()
    return total


def churn_chunks(calls: int, hold_s: float, limit: int = 400) -> int:
    """oscillate() at each depth where a leaf() call maps a fresh chunk (it
    first-touches a new page: a minor fault each time). Found and churned
    from this one frame: the depths count from the caller's stack."""
    found = 0
    for depth in range(limit):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        oscillate(depth, 20)
        if resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before >= 15:
            oscillate(depth, calls, hold_s)
            found += 1
    return found


def deep(n: int) -> int:
    return 0 if n == 0 else 1 + deep(n - 1)


def hold(n: int, cpu_s: float) -> int:
    # Deep for a while (its chunks mapped), then unwound (unmapped).
    return hold(n - 1, cpu_s) if n > 0 else burn(cpu_s)


def raise_from(n: int) -> None:
    if n == 0:
        raise ValueError("unwound")
    raise_from(n - 1)


def gen(n: int):
    for i in range(n):
        yield deep(i % 50)


async def coro(n: int) -> int:
    total = 0
    for i in range(n):
        await asyncio.sleep(0)
        total += deep(i % 40)
    return total


class Node:
    def __init__(self) -> None:
        self.other = self  # a cycle only the collector frees


def churn_memory() -> None:
    big = [[i] * 8 for i in range(60000)]  # arenas filled, then emptied and unmapped
    del big
    cycles = [Node() for _ in range(2000)]
    del cycles
    gc.collect()


def worker_thread() -> None:
    # Records a range, so it is sampled from its first flush until it ends.
    with rlscope_ray.range("worker"):
        churn_chunks(200, hold_s=0.0, limit=220)
        try:
            raise_from(200)
        except ValueError:
            pass


def one_round() -> int:
    found = churn_chunks(2000, hold_s=0.03)
    hold(1500, 0.03)
    for _ in range(20):
        deep(2500)
    for _ in range(20):
        try:
            raise_from(400)
        except ValueError:
            pass
    sum(gen(200))
    asyncio.run(coro(100))
    threads = [threading.Thread(target=worker_thread) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    churn_memory()
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0, help="CPU seconds of churn")
    args = ap.parse_args()
    sys.setrecursionlimit(10000)
    rlscope_ray.start()
    rounds = boundaries = 0
    start = time.process_time()
    with rlscope_ray.range("churn"):
        while time.process_time() - start < args.seconds:
            boundaries = one_round()
            rounds += 1
    rlscope_ray.stop()
    rlscope_ray.flush()
    print(json.dumps({"rounds": rounds, "boundaries": boundaries, "stats": rlscope_ray.stats()}), flush=True)


if __name__ == "__main__":
    main()
