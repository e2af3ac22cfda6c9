"""A controller annotated only with the `nvtx` package, as verl's trainer is:
an NVTX range "step" per training step with sub-task ranges inside, and
pauses between steps. Knows nothing of rlscope except, with --api-window N,
rlscope_ray.start()/stop() around step N (the `api` trigger).

    step_controller.py --steps 5 --step-ms 300 --gap-ms 100 [--subtasks gen,update_actor,update_actor]
                       [--prep-before 3] [--trigger-range 2] [--api-window 4]
                       [--wait-before STEP FILE] [--wait-inside STEP BEGAN WAIT] [--start-end]
                       [--first-payload N] --report FILE

The report brackets each step's begin and end between its own
CLOCK_MONOTONIC readings just before and just after the NVTX call
(begin_ns..begin_hi_ns, end_lo_ns..end_ns). --wait-before STEP FILE: before
step STEP begins, wait until FILE exists (a test's handshake with a worker).
--wait-inside STEP BEGAN WAIT: once step STEP has begun, create BEGAN, then
wait until WAIT exists before its sub-tasks (a worker started inside it).
--start-end: "step" and the sub-tasks are start/end ranges (nvtx.start_range /
end_range), as verl's marked_timer opens them. --first-payload N: the steps'
ranges carry the payloads N, N+1, ... (a resumed run's own step numbers).
"""
import argparse
import json
import os
import time

import nvtx


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def wait_for(path: str) -> None:
    deadline = time.monotonic() + 60  # a hang guard
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--step-ms", type=float, default=100)
    ap.add_argument("--gap-ms", type=float, default=50)
    ap.add_argument("--subtasks", default="gen,update_actor")
    ap.add_argument("--prep-before", type=int, default=0, help="open a range 'prep' just before this step")
    ap.add_argument("--trigger-range", type=int, default=0,
                    help="wrap this step's sub-tasks in a range named 'capture' (nvtx:capture trigger)")
    ap.add_argument("--api-window", type=int, default=0, help="rlscope_ray.start()/stop() around this step")
    ap.add_argument("--wait-before", nargs=2, metavar=("STEP", "FILE"))
    ap.add_argument("--wait-inside", nargs=3, metavar=("STEP", "BEGAN", "WAIT"))
    ap.add_argument("--start-end", action="store_true")
    ap.add_argument("--first-payload", type=int, default=None)
    ap.add_argument("--report", required=True)
    args = ap.parse_args()
    subtasks = [s for s in args.subtasks.split(",") if s]
    steps = []
    for n in range(1, args.steps + 1):
        if args.api_window == n:
            import rlscope_ray
            rlscope_ray.start()
        prep = args.prep_before == n
        if prep:
            nvtx.push_range("prep")
            spin(5)
        if args.wait_before and int(args.wait_before[0]) == n:
            wait_for(args.wait_before[1])
        t0 = time.monotonic_ns()
        payload = None if args.first_payload is None else args.first_payload + n - 1
        step_range = (nvtx.start_range("step", payload=payload) if args.start_end
                      else nvtx.push_range("step", payload=payload))
        t1 = time.monotonic_ns()
        if args.wait_inside and int(args.wait_inside[0]) == n:
            open(args.wait_inside[1], "w").close()
            wait_for(args.wait_inside[2])
        if prep:
            spin(5)
            nvtx.pop_range()  # closes "prep" inside the step: it straddles the step's begin
        nvtx.mark("before_subtasks")
        if args.trigger_range == n:
            nvtx.push_range("capture")
        for name in subtasks:
            if args.start_end:
                r = nvtx.start_range(name)
                spin(args.step_ms / max(1, len(subtasks)) * 0.9)
                nvtx.end_range(r)
                continue
            with nvtx.annotate(name):
                spin(args.step_ms / max(1, len(subtasks)) * 0.9)
        if args.trigger_range == n:
            nvtx.pop_range()
        t2 = time.monotonic_ns()
        if args.start_end:
            nvtx.end_range(step_range)
        else:
            nvtx.pop_range()
        steps.append({"step": n, "begin_ns": t0, "begin_hi_ns": t1, "end_lo_ns": t2, "end_ns": time.monotonic_ns()})
        if args.api_window == n:
            rlscope_ray.stop()
        with nvtx.annotate("between_steps"):
            time.sleep(args.gap_ms / 1000)
    with open(args.report, "w") as f:
        json.dump({"steps": steps}, f)


if __name__ == "__main__":
    main()
