#!/usr/bin/env python3
"""Checks GPU activity in an aggregator output directory (run_gpu_checks.sh).

    check_gpu_trace.py OUT_DIR [--kernel SUBSTRING] [--need memcpy,memset,sync,memory]

Expected trace shape (Chrome trace JSON, one step_N/trace.json per step):
  - kernels: "X" events, cat "gpu", named after the kernel, on a track whose
    thread_name metadata starts with "stream ";
  - copies: "X" events on a stream track whose name mentions memcpy/HtoD/DtoH;
  - CUDA API calls: "X" events, cat "cuda_api", on the calling thread
    (cudaLaunchKernel among them);
  - flows "s"/"f", cat "launch", one id per correlation id, from the launch's
    thread to the kernel's stream track.
Also: run.json labels the controller process gpu_tracing "on". With --need
memory: some process of each step has GPU memory allocated (its summary's
processes[].memory.gpu, from CUPTI's MEMORY2 records) and a "GPU D memory
allocated (MiB)" counter track in the trace.
Prints one summary line; exits 1 with the problems otherwise.
"""
import argparse
import json
import pathlib
import re
import sys


def load_steps(out):
    steps = {}
    for p in sorted(out.glob("step_*")):
        trace = p / "trace.json"
        if trace.exists():
            steps[p.name] = json.loads(trace.read_text())["traceEvents"]
    return steps


def check_step(events, kernel_substring, need):
    problems = []
    thread_names = {
        (e.get("pid"), e.get("tid")): e.get("args", {}).get("name", "")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    stream_tracks = {k for k, v in thread_names.items() if v.startswith("stream ")}
    xs = [e for e in events if e.get("ph") == "X"]
    on_stream = [e for e in xs if (e.get("pid"), e.get("tid")) in stream_tracks]
    kernels = [e for e in on_stream if e.get("cat") == "gpu" and kernel_substring in e.get("name", "")]
    copies = [e for e in on_stream if re.search(r"memcpy|htod|dtoh", e.get("name", ""), re.I)]
    sets = [e for e in on_stream if re.search(r"memset", e.get("name", ""), re.I)]
    api = [e for e in xs if e.get("cat") == "cuda_api"]
    launches = [e for e in api if e.get("name", "").startswith("cudaLaunchKernel")]
    syncs = [e for e in xs if re.search(r"synchroni[sz]e", e.get("name", ""), re.I)]
    flows_s = {e.get("id"): e for e in events if e.get("ph") == "s" and e.get("cat") == "launch"}
    flows_f = {e.get("id"): e for e in events if e.get("ph") == "f" and e.get("cat") == "launch"}
    launch_tracks = {(e.get("pid"), e.get("tid")) for e in launches}
    kernel_tracks = {(e.get("pid"), e.get("tid")) for e in kernels}
    linked = [
        i for i, s in flows_s.items()
        if i in flows_f
        and (s.get("pid"), s.get("tid")) in launch_tracks
        and (flows_f[i].get("pid"), flows_f[i].get("tid")) in kernel_tracks
    ]
    if not stream_tracks:
        problems.append("no track named 'stream ...'")
    if not kernels:
        problems.append(f"no kernel slice (cat gpu, name containing {kernel_substring!r}) on a stream track")
    if "memcpy" in need and not copies:
        problems.append("no memcpy slice on a stream track")
    if "memset" in need and not sets:
        problems.append("no memset slice on a stream track")
    if "sync" in need and not syncs:
        problems.append("no synchronize slice")
    if not launches:
        problems.append("no cudaLaunchKernel slice (cat cuda_api)")
    if not linked:
        problems.append(
            f"no launch flow s->f from a cudaLaunchKernel thread to a kernel's stream track "
            f"({len(flows_s)} s, {len(flows_f)} f)"
        )
    counts = dict(kernels=len(kernels), copies=len(copies), sets=len(sets), api=len(api),
                  launches=len(launches), flows=len(linked), streams=sorted(thread_names[k] for k in stream_tracks))
    return problems, counts


def check_memory(step_dir, events, counts):
    summary = json.loads((step_dir / "summary.json").read_text())
    peaks = [g.get("allocated_peak_mb", 0) for p in summary.get("processes", [])
             for g in (p.get("memory") or {}).get("gpu", [])]
    counters = [e for e in events if e.get("ph") == "C" and "memory allocated" in e.get("name", "")]
    counts.update(gpu_allocated_peak_mb=max(peaks, default=0), memory_counters=len(counters))
    problems = []
    if not any(v > 0 for v in peaks):
        problems.append(f"no process with GPU memory allocated in summary.json (memory.gpu peaks {peaks})")
    if not counters:
        problems.append("no 'GPU D memory allocated (MiB)' counter events")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--kernel", default="")
    ap.add_argument("--need", default="")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    need = {n for n in args.need.split(",") if n}
    problems = []
    steps = load_steps(out)
    if not steps:
        problems.append(f"no step_*/trace.json under {out}")
    summary = {}
    for name, events in steps.items():
        p, counts = check_step(events, args.kernel, need)
        if "memory" in need:
            p += check_memory(out / name, events, counts)
        problems += [f"{name}: {x}" for x in p]
        summary[name] = counts
    run = out / "run.json"
    if run.exists():
        procs = json.loads(run.read_text()).get("processes", [])
        ctl = [p for p in procs if p.get("role") == "controller"]
        labels = [p.get("labels", {}).get("gpu_tracing") for p in ctl]
        if "on" not in labels:
            problems.append(f"run.json: controller's gpu_tracing label is {labels}, want 'on'")
    else:
        problems.append("no run.json")
    print("; ".join(problems) if problems else json.dumps(summary))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
