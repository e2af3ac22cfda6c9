"""Whole-process attribution's known answer (tests/test_whole_process.py): a
controller whose steps run sub-tasks with a known truth, each measured by
the program itself:

- `pool`: threads this program starts inside the window, in a native library
  (pool_lib.c), that never record an event, burn a known amount of their own
  CPU time; the main thread waits for them (off CPU, in pthread_join).
- `sim`: the main thread steps a "simulator" library (sim_lib.c) whose time
  is spent in libm and libc, called from it.
- `own`: a thread that says it works for the collector (rlscope_ray's speed
  watch after its calibration does) burns a known amount of Python CPU; the
  main thread waits for it.
- `sleep`, `lock`, `poll`, `io`, `gil`: the main thread waits, in turn, in
  time.sleep, on a threading.Lock a helper holds, in select() on a socket
  nobody writes to, in a read of a pipe a helper writes to later, and for
  the GIL that a helper holds in a C call. Each wait lasts until the
  collector looked at the main thread's state `--looks` times (a handshake
  with the off-CPU sampler through its counters, not a timing), so each
  window holds that many looks at any machine load.

Writes what it measured as JSON to --report."""
import argparse
import ctypes
import json
import os
import select
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlscope_ray  # noqa: E402
from attribution_app import python_loop  # noqa: E402


def wait_for(what, predicate) -> None:
    """Until predicate() holds: a handshake with the collector; a hang guard."""
    if not rlscope_ray._native.running():
        return
    deadline = time.monotonic() + 60
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: {rlscope_ray.stats()}"
        time.sleep(0.002)


def looks() -> int:
    return rlscope_ray.stats()["off_cpu_looks"]


def own_phase(cpu_s: float) -> float:
    """A thread that says it works for the collector, as rlscope_ray's speed
    watch does, burns `cpu_s` of Python CPU; returns the CPU it used in all
    (the first sample flagged the profiler's carries the thread's CPU since
    the sample before, which may be all it used before saying so). It says
    so once the collector has listed it as the program's (two looks of the
    off-CPU sampler: each flush lists the threads before it looks, in steps
    chosen up front), and burns two looks after that."""
    burnt = []

    def two_looks():
        start, t0 = looks(), time.monotonic()
        while not wait_done(start, t0, 2):
            time.sleep(0.002)

    def work():
        two_looks()  # listed (and sampled) as the program's
        rlscope_ray._native.own_thread("own-work")
        two_looks()  # listed again: the profiler's from now on
        python_loop(cpu_s)
        burnt.append(time.thread_time())  # the thread's own clock: since it began

    timers = rlscope_ray.stats()["cpu_timers"]
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    # Its timer goes with it: the next step's pool counts timers.
    wait_for("the own thread's timer gone", lambda: rlscope_ray.stats()["cpu_timers"] <= timers)
    return burnt[0]


def wait_done(start: int, t0: float, n: int) -> bool:
    """A wait is over after n looks of the off-CPU sampler; with no collector
    (as under another profiler), after 0.2 s."""
    if not rlscope_ray._native.running():
        return time.monotonic() - t0 >= 0.2
    return looks() >= start + n


class Helper(threading.Thread):
    """Runs what the main thread asks (a callable) on a thread of its own; it
    records no events, so its own waits are nobody's off-CPU time."""

    def __init__(self):
        super().__init__(name="helper", daemon=True)
        self.jobs, self.cv = [], threading.Condition()

    def submit(self, job) -> None:
        with self.cv:
            self.jobs.append(job)
            self.cv.notify()

    def run(self) -> None:
        while True:
            with self.cv:
                while not self.jobs:
                    self.cv.wait()
                job = self.jobs.pop(0)
            job()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pool-lib", required=True)
    ap.add_argument("--sim-lib", required=True)
    ap.add_argument("--collector", required=True, help="librlscope_collector.so (its stats function)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cpu-s", type=float, default=0.3, help="CPU seconds per pool thread and for the sim phase")
    ap.add_argument("--looks", type=int, default=8, help="off-CPU looks per waiting phase")
    ap.add_argument("--report", required=True)
    args = ap.parse_args()
    pool = ctypes.CDLL(args.pool_lib)
    pool.rlscope_test_pool_start.argtypes = [ctypes.c_int, ctypes.c_double]
    pool.rlscope_test_pool_join.argtypes = [ctypes.POINTER(ctypes.c_double)]
    pool.rlscope_test_wait_looks.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_double]
    pool.rlscope_test_wait_looks.restype = ctypes.c_uint64
    # The same function held under the GIL (PyDLL does not release it).
    gil_pool = ctypes.PyDLL(args.pool_lib)
    gil_pool.rlscope_test_wait_looks.argtypes = pool.rlscope_test_wait_looks.argtypes
    gil_pool.rlscope_test_wait_looks.restype = ctypes.c_uint64
    stats_fn = ctypes.cast(ctypes.CDLL(args.collector).rlscope_sampler_stats, ctypes.c_void_p).value
    max_wait_s = 60.0 if rlscope_ray._native.running() else 0.2  # no collector: looks never come
    sim = ctypes.CDLL(args.sim_lib).rlscope_test_sim_step
    sim.argtypes, sim.restype = [ctypes.c_double], ctypes.c_double
    helper = Helper()
    helper.start()
    lock = threading.Lock()
    quiet_a, quiet_b = socket.socketpair()
    report = {"steps": {}}
    for n in range(1, args.steps + 1):
        phases = {}
        with rlscope_ray.step(n):
            wait_for("a CPU timer for the main thread", lambda: rlscope_ray.stats()["cpu_timers"] >= 1)
            with rlscope_ray.range("pool"):
                timers = rlscope_ray.stats()["cpu_timers"]
                assert pool.rlscope_test_pool_start(args.threads, args.cpu_s) == 0
                # Started in the window: sampled once the flush thread found them.
                t0 = time.monotonic()
                wait_for("timers for the pool", lambda: rlscope_ray.stats()["cpu_timers"] >= timers + args.threads)
                phases["pickup_ms"] = 1000 * (time.monotonic() - t0)
                pool.rlscope_test_pool_go()
                cpu = (ctypes.c_double * args.threads)()
                pool.rlscope_test_pool_join(cpu)
                phases["pool"] = list(cpu)
            with rlscope_ray.range("sim"):
                phases["sim"] = sim(args.cpu_s)
            start, t0 = looks(), time.monotonic()
            with rlscope_ray.range("sleep"):
                while not wait_done(start, t0, args.looks):
                    time.sleep(0.02)
            held = threading.Event()

            def hold_lock():
                with lock:
                    held.set()
                    pool.rlscope_test_wait_looks(stats_fn, args.looks, max_wait_s)  # GIL released
            helper.submit(hold_lock)
            held.wait()
            with rlscope_ray.range("lock"):
                lock.acquire()
                lock.release()
            start, t0 = looks(), time.monotonic()
            with rlscope_ray.range("poll"):
                while not wait_done(start, t0, args.looks):
                    select.select([quiet_a], [], [], 0.02)
            r, w = os.pipe()

            def write_later():
                pool.rlscope_test_wait_looks(stats_fn, args.looks, max_wait_s)
                os.write(w, b"x")
            with rlscope_ray.range("io"):
                helper.submit(write_later)
                os.read(r, 1)
            os.close(r)
            os.close(w)
            started = threading.Event()

            def hold_gil():
                started.set()
                gil_pool.rlscope_test_wait_looks(stats_fn, args.looks, max_wait_s)  # GIL held throughout
            with rlscope_ray.range("gil"):
                helper.submit(hold_gil)
                started.wait()  # returns once the helper lets go of the GIL
            with rlscope_ray.range("own"):
                phases["own"] = own_phase(args.cpu_s / 3)
        report["steps"][str(n)] = phases
    rlscope_ray.flush()
    report["stats"] = rlscope_ray.stats()
    quiet_a.close()
    quiet_b.close()
    with open(args.report, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
