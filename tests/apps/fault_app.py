"""The CPU sampler never crashes its host, and the host's own fault handling
is as without it (tests/test_sampler_safety.py). A controller, config steps
[2]: sampled from step 1's end through step 2. Prints one JSON line.

  unmapped    a frame reader reads a page (tests/apps/fault_lib.c) that is
              unmapped in the middle of step 2, then mapped afresh before
              the step ends: the samples in between keep no module and are
              counted unread, none crashes. --host-after: the host installs
              its own SIGSEGV handler once sampling runs (above the
              sampler's guard): reads then go through the kernel, and the
              host's handler sees none of them.
  host        the host's SIGSEGV handler repairs faults on a page of its own
              in step 2, installed before sampling starts (--before) or once
              it runs: it gets every one of them, and nothing else.
  crash       a real crash in host code once sampling runs (--faulthandler:
              Python's faulthandler enabled first): the process ends as it
              would without the profiler.
  slow        a frame reader that spins 200 us in every sample for the
              middle of step 2 (its handler as slow as one preempted inside
              it), and reads at once before and after."""
import argparse
import ctypes
import faulthandler
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlscope_ray  # noqa: E402
from sampler_app import burn  # noqa: E402


def sampling_set_up() -> None:
    """Until this thread has its CPU-time timer: the sampler and its fault
    guard are installed. A handshake; a hang guard. (No collector: nothing
    to wait for.)"""
    if not rlscope_ray._native.running():
        return
    deadline = time.monotonic() + 60
    while rlscope_ray.stats()["cpu_timers"] < 1:
        assert time.monotonic() < deadline, f"no CPU timer: {rlscope_ray.stats()}"
        time.sleep(0.001)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["unmapped", "host", "crash", "slow"])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--host-after", action="store_true")
    ap.add_argument("--before", action="store_true")
    ap.add_argument("--faulthandler", action="store_true")
    args = ap.parse_args()
    lib = ctypes.CDLL(args.lib)
    lib.rlscope_test_touch_host_page.restype = ctypes.c_long
    lib.rlscope_test_host_seen.restype = ctypes.c_long
    if args.faulthandler:
        faulthandler.enable()
    out = {}
    if args.mode in ("unmapped", "slow"):
        collector = ctypes.CDLL(rlscope_ray.collector_path())
        lib.rlscope_test_map_target(b"rlscope_test.mapped")
        use = lib.rlscope_test_use_fault_reader if args.mode == "unmapped" else lib.rlscope_test_use_slow_reader
        use(ctypes.cast(collector.rlscope_set_py_module_reader, ctypes.c_void_p))
    if args.mode == "host" and args.before:
        assert lib.rlscope_test_install_host_handler()
    with rlscope_ray.step(1):
        pass
    with rlscope_ray.range("between"):  # the window of step 2 is open
        sampling_set_up()
    if args.host_after:
        assert lib.rlscope_test_install_host_handler()
    if args.mode == "host" and not args.before:
        assert lib.rlscope_test_install_host_handler()
    with rlscope_ray.step(2):
        if args.mode == "unmapped":
            burn(0.2)
            lib.rlscope_test_unmap_target()
            burn(0.4)
            lib.rlscope_test_map_target(b"rlscope_test.again")  # readable again before the step ends
            burn(0.1)
        elif args.mode == "slow":
            # A flush after each tenth of a CPU second at full speed: the
            # handler's in-place figures go out in 6 flushes (the sampler's
            # CPU-time timer fires in every one), however long they take.
            for slow_ns in (0, 200000, 0):
                lib.rlscope_test_set_slow_ns(ctypes.c_long(slow_ns))
                for _ in range(3):
                    burn(0.1)
                    if not slow_ns:
                        rlscope_ray.flush(timeout_s=60)
        elif args.mode == "host":
            touches = 0
            for _ in range(200):
                faults = lib.rlscope_test_touch_host_page()
                touches += 1
                burn(0.002)
            out["touches"], out["host_faults"] = touches, faults
        else:
            burn(0.1)
            print("crashing", file=sys.stderr, flush=True)
            lib.rlscope_test_segfault()
    with rlscope_ray.step(3):
        pass
    rlscope_ray.flush()
    out["stats"] = rlscope_ray.stats()
    if args.mode != "crash":
        out["host_seen"] = lib.rlscope_test_host_seen()  # every SIGSEGV its handler got
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
