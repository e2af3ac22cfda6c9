"""Cross-stack attribution's known answer (tests/test_attribution.py): a
controller whose steps each run three sub-tasks that burn a known amount of
thread CPU time in three places: `native` in a test-only shared library,
`python` in a pure Python loop in this file, `sim` in the module
rlscope_test_sim (the config names the library the backend and the module the
simulator). Each phase measures its own thread CPU time, which is what the
summary's categories must show, within the sampling error, at any load. A
second thread, `helper`, runs the simulator module too inside each `sim`
sub-task. Writes the measured times as JSON to --report."""
import argparse
import ctypes
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlscope_ray  # noqa: E402
import rlscope_test_sim  # noqa: E402


def python_loop(cpu_seconds: float) -> float:
    start = time.thread_time()
    x, now = 1, start
    while now - start < cpu_seconds:
        for _ in range(2000):
            x = (x * 69069 + 1) & 0x7FFFFFFF
        now = time.thread_time()
    return now - start


def wait_for_timers(n: int) -> None:
    """Until n threads have their CPU-time timer (the flush thread makes one
    when a thread records its first event in a window): CPU they burn before
    it would not be sampled. A handshake, not a timing; a hang guard. (No
    collector, as under another profiler: nothing to wait for.)"""
    if not rlscope_ray._native.running():
        return
    deadline = time.monotonic() + 60
    while rlscope_ray.stats()["cpu_timers"] < n:
        assert time.monotonic() < deadline, f"no CPU timer for {n} threads: {rlscope_ray.stats()}"
        time.sleep(0.001)


class Helper(threading.Thread):
    """Burns `phase_s` in the simulator module each time it is asked, inside
    a range of its own."""

    def __init__(self, phase_s: float):
        super().__init__(name="helper", daemon=True)
        self.phase_s = phase_s
        self.go, self.done = threading.Event(), threading.Event()
        self.cpu = 0.0

    def run(self) -> None:
        while True:
            self.go.wait()
            self.go.clear()
            with rlscope_ray.range("helper"):
                wait_for_timers(2)
                t0 = time.thread_time()
                rlscope_test_sim.step(self.phase_s)
                self.cpu = time.thread_time() - t0
            self.done.set()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="librlscope_test_burn.so")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--phase-s", type=float, default=0.25, help="thread CPU seconds per phase")
    ap.add_argument("--report", required=True)
    args = ap.parse_args()
    burn = ctypes.CDLL(args.lib).rlscope_test_burn
    burn.restype = ctypes.c_double
    burn.argtypes = [ctypes.c_double]
    helper = Helper(args.phase_s)
    helper.start()
    report = {"steps": {}}
    # FLUSHES: one after each phase, outside its range: the sampler's
    # in-place handler figures go out with each flush, so step 2's summary
    # has at least the 4 that charge them (correction.h kMinSamples) at any
    # load (each phase burns CPU time, and the timer fires on CPU time).
    for n in range(1, args.steps + 1):
        phases = {}
        with rlscope_ray.step(n):
            wait_for_timers(1)
            with rlscope_ray.range("native"):
                t0 = time.thread_time()
                burn(args.phase_s)
                phases["native"] = time.thread_time() - t0
            rlscope_ray.flush(timeout_s=60)  # (FLUSHES)
            with rlscope_ray.range("python"):
                t0 = time.thread_time()
                python_loop(args.phase_s)
                phases["python"] = time.thread_time() - t0
            rlscope_ray.flush(timeout_s=60)  # (FLUSHES)
            with rlscope_ray.range("sim"):
                helper.done.clear()
                helper.go.set()
                t0 = time.thread_time()
                rlscope_test_sim.step(args.phase_s)
                phases["sim"] = time.thread_time() - t0
                helper.done.wait()
            phases["helper"] = helper.cpu
            rlscope_ray.flush(timeout_s=60)  # (FLUSHES)
        report["steps"][str(n)] = phases
    rlscope_ray.flush()
    report["stats"] = rlscope_ray.stats()
    with open(args.report, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
