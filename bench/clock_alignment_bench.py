"""Clock alignment: collectors in time namespaces with known offsets.

    python bench/clock_alignment_bench.py --build-dir build/py [--load] [--path udp|connection]
        [--late SPEC] [--steps N]

The aggregator, a controller and three workers, each in a Linux time
namespace of its own (as tests/test_clock.py: offsets are taken from the
host's clock and must not put the clock below zero, so the aggregator and the
controller run at +BASE_S and the workers at BASE_S + each offset). The
controller runs --steps steps of 300 ms (12 s by default: long enough for the
drift fit, which starts at 10 s), the default config but `clock.udp_probes`
as --path says. Prints one JSON line: per step and worker, the stated bound
and the real error (the estimate at the step's middle against the injected
offset, exact: the namespaces share one underlying clock), and what each
step says (complete, waited for a clock, marked). --late gives the workers
RLSCOPE_TEST_PROBE_LATE (names.h: their own bursts' answers read late).
--load keeps both cores busy meanwhile (two spinning processes).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.abspath(os.path.dirname(os.path.abspath(__file__))))
OFFSETS_S = (-500, 0, 1234)  # each worker's clock minus the aggregator's
BASE_S = 1000


def unshare(offset_s):
    return ["unshare", "--fork", "--kill-child=SIGTERM", "--time", "--monotonic", str(offset_s)]


def run(args) -> dict:
    import rlscope_ray
    from rlscope_ray.aggregator_process import start_aggregator

    tmp = tempfile.mkdtemp(prefix="rlscope_clock_bench_")
    config = "clock: {udp_probes: %s}\n" % ("true" if args.path == "udp" else "false")
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)] if args.load else []
    stop = os.path.join(tmp, "stop")
    agg, workers = None, []
    try:
        agg = start_aggregator(os.path.join(tmp, "out"), command=unshare(BASE_S) + [rlscope_ray.aggregator_path()],
                               args=["--exit-when-done", "--grace-ms", "3000"], work_dir=tmp, database=False)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLSCOPE_")}
        env.update(RLSCOPE_AGGREGATOR=agg.endpoint, NVTX_INJECTION64_PATH=rlscope_ray.collector_path(),
                   RLSCOPE_CONFIG=config, RLSCOPE_CLOCK="monotonic")
        for rank, offset in enumerate(OFFSETS_S):
            ready = os.path.join(tmp, f"w{rank}.ready")
            wenv = dict(env, RLSCOPE_ROLE="worker", RLSCOPE_RANK=str(rank))
            if args.late:
                wenv["RLSCOPE_TEST_PROBE_LATE"] = args.late
            workers.append((ready, subprocess.Popen(
                unshare(BASE_S + offset) + [sys.executable, os.path.join(ROOT, "tests", "apps", "nvtx_worker.py"),
                                            "--duration", "300", "--stop-file", stop, "--ready", ready,
                                            "--report", os.path.join(tmp, f"w{rank}.json")], env=wenv)))
        for ready, proc in workers:
            deadline = time.monotonic() + 120
            while not os.path.exists(ready):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("a worker did not start")
                time.sleep(0.02)
        subprocess.run(unshare(BASE_S) + [os.path.join(args.build_dir, "tests", "apps", "nvtx_app"), "--steps",
                                          str(args.steps), "--step-ms", "300"],
                       env=dict(env, RLSCOPE_ROLE="controller"), check=True)
        open(stop, "w").close()
        for _, w in workers:
            w.wait()
        agg.proc.wait(timeout=120)
        out = os.path.join(tmp, "out")
        summaries = []
        for name in sorted(os.listdir(out)):
            if name.startswith("step_"):
                with open(os.path.join(out, name, "summary.json")) as f:
                    summaries.append(json.load(f))
        with open(os.path.join(out, "run.json")) as f:
            run_json = json.load(f)
    finally:
        open(stop, "w").close()
        for p in load + [w for _, w in workers] + ([agg.proc] if agg is not None else []):
            if p.poll() is None:
                p.kill()
                p.wait()
    checks, steps = [], []
    for s in summaries:
        middle = (s["begin_ns"] + s["end_ns"]) // 2
        wrong_silently = False
        for p in s["processes"]:
            if p["role"] != "worker":
                continue
            c = p["clock"]
            injected = -OFFSETS_S[p["rank"]] * 1_000_000_000  # aggregator minus collector
            error = None
            if c["aligned"]:
                # The estimate at the step's middle (collector time = aggregator time - offset).
                collector = middle - c["offset_ns"]
                estimate = c["offset_ns"] + c["drift_ppm"] * 1e-6 * (collector - c["ref_ns"])
                error = abs(estimate - injected)
                checks.append({"bound_ns": c["bound_ns"], "error_ns": error, "fitness": p["clock_fitness"]})
            ok = p["clock_fitness"] == "good" and error is not None and error <= c["bound_ns"] and p["spans"] > 0
            if s["reason"] == "complete" and not ok:
                wrong_silently = True
        steps.append({"reason": s["reason"], "held": s.get("clock_held", False), "wrong_silently": wrong_silently})
    return {"path": args.path, "load": args.load, "late": args.late, "checks": checks, "steps": steps,
            "probe_requests": run_json.get("probe_requests"), "revisions": run_json.get("clock_revisions_total")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="build/py")
    ap.add_argument("--load", action="store_true")
    ap.add_argument("--path", choices=("udp", "connection"), default="udp")
    ap.add_argument("--late", default="")
    ap.add_argument("--steps", type=int, default=40)
    print(json.dumps(run(ap.parse_args())))


if __name__ == "__main__":
    main()
