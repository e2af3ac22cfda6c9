"""The collector's own Python frame reader meets a frame whose memory went
away (tests/test_sampler_safety.py). A controller, config steps [2]:
sampled from step 1's end through step 2. In step 2, first a control (C code
spinning, the frames as they are), then tests/apps/frame_fault.c's hold()
called from a function of the module `rlscope_test.frames`: its frame on a
page of its own (readable, then PROT_NONE). Prints one JSON line: the
collector's counters after each phase, and the phases' bounds.

    python frame_fault_app.py EXTENSION_DIR
"""
import json
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, sys.argv[1])
import rlscope_ray  # noqa: E402
import rlscope_test_frame_fault as ext  # noqa: E402
from fault_app import sampling_set_up  # noqa: E402

frames = types.ModuleType("rlscope_test.frames")
exec(compile("def run(ext, mapped_s, gone_s):\n    ext.hold(mapped_s, gone_s)\n", "<frames>", "exec"),
     frames.__dict__)


def main() -> None:
    out = {"python_frames": rlscope_ray._native.PYTHON_FRAMES, "phases": {}, "stats": {}}
    with rlscope_ray.step(1):
        pass
    with rlscope_ray.range("between"):  # the window of step 2 is open
        sampling_set_up()
    with rlscope_ray.step(2):
        out["stats"]["start"] = rlscope_ray.stats()
        for phase, body in (("control", lambda: ext.spin(0.3)), ("hold", lambda: frames.run(ext, 0.3, 0.4))):
            begin = time.monotonic_ns()
            with rlscope_ray.range(phase):  # a sub-task each: its own attribution
                body()
            out["phases"][phase] = [begin, time.monotonic_ns()]
            out["stats"][phase] = rlscope_ray.stats()
    with rlscope_ray.step(3):
        pass
    rlscope_ray.flush()
    out["stats"]["end"] = rlscope_ray.stats()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
