"""The CPU sampler's contract with its host (tests/test_attribution.py), one
mode per run; prints one JSON line with what it saw.

  windows     controller, steps [2]: samples only inside the capture window
              (from step 1's end to step 2's), none in step 3, none after
              the collector shut down (no timer left).
  api         capture_range api: sampled between start() and stop(); run it
              with ranks [1] and rank 0 to see an unselected rank never sampled.
  eintr       blocking system calls (poll, nanosleep) between bursts of CPU
              while sampled: none fails with EINTR.
  host        the host's own profiling timer (setitimer(ITIMER_PROF), SIGPROF)
              keeps working while sampled; then the host takes the sampler's
              signal for itself: sampling stops, its handler gets none of ours.
"""
import ctypes
import errno
import json
import signal
import sys
import time

import rlscope_ray


def burn(cpu_seconds: float) -> None:
    start = time.thread_time()
    x = 1
    while time.thread_time() - start < cpu_seconds:
        for _ in range(2000):
            x = (x * 69069 + 1) & 0x7FFFFFFF


def signals() -> int:
    return rlscope_ray.stats()["cpu_signals"]


def windows() -> dict:
    out = {}
    with rlscope_ray.step(1):
        burn(0.2)
        out["in_step_1"] = rlscope_ray.stats()  # disarmed throughout step 1
    with rlscope_ray.range("between"):  # armed: the window of step 2 opens at step 1's end
        burn(0.2)
    with rlscope_ray.step(2):
        burn(0.2)
    rlscope_ray.flush()  # the flush thread has disarmed the timers when this returns
    out["after_step_2"] = rlscope_ray.stats()
    with rlscope_ray.step(3):
        burn(0.3)
    out["after_step_3"] = rlscope_ray.stats()
    rlscope_ray.shutdown_collector()
    out["after_shutdown"] = rlscope_ray.stats()
    burn(0.3)
    out["end"] = rlscope_ray.stats()
    return out


def api() -> dict:
    rlscope_ray.start()
    with rlscope_ray.range("work"):
        burn(0.3)
    rlscope_ray.flush()
    out = {"captured": rlscope_ray.stats()}
    rlscope_ray.stop()
    rlscope_ray.flush()
    out["stopped"] = rlscope_ray.stats()
    burn(0.3)
    out["end"] = rlscope_ray.stats()
    return out


def eintr() -> dict:
    libc = ctypes.CDLL(None, use_errno=True)

    class Timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

    rlscope_ray.start()
    failed = {"poll": 0, "nanosleep": 0}
    calls = 0
    with rlscope_ray.range("syscalls"):
        for _ in range(300):
            burn(0.002)
            if libc.poll(None, 0, 1) < 0 and ctypes.get_errno() == errno.EINTR:
                failed["poll"] += 1
            ts = Timespec(0, 200000)
            if libc.nanosleep(ctypes.byref(ts), None) < 0 and ctypes.get_errno() == errno.EINTR:
                failed["nanosleep"] += 1
            calls += 2
    rlscope_ray.flush()
    return {"eintr": failed, "calls": calls, "stats": rlscope_ray.stats()}


def host() -> dict:
    prof = {"n": 0}
    signal.signal(signal.SIGPROF, lambda *_: prof.__setitem__("n", prof["n"] + 1))
    rlscope_ray.start()
    with rlscope_ray.range("work"):
        signal.setitimer(signal.ITIMER_PROF, 0.01, 0.01)
        burn(0.4)
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
    rlscope_ray.flush()
    out = {"sigprof": prof["n"], "sampled": rlscope_ray.stats()}
    sig = out["sampled"]["cpu_signal"]
    taken = {"n": 0}
    signal.signal(sig, lambda *_: taken.__setitem__("n", taken["n"] + 1))
    # The flush thread sees the handler is not ours: sampling stops, every
    # timer deleted. (A flush that timed out on a loaded machine: again.)
    out["flushes_to_stop"] = 1
    while not rlscope_ray.flush():
        out["flushes_to_stop"] += 1
    out["took_signal"] = rlscope_ray.stats()
    # (Until that flush a timer signal could still reach the host's handler:
    # the window the sampler cannot close. From here on, none may.)
    taken["n"] = 0
    with rlscope_ray.range("more"):
        burn(0.4)
    rlscope_ray.flush()
    out["end"] = rlscope_ray.stats()
    out["host_handler_calls"] = taken["n"]
    return out


if __name__ == "__main__":
    print(json.dumps({"windows": windows, "api": api, "eintr": eintr, "host": host}[sys.argv[1]]()), flush=True)
