"""Live per-step figures as Prometheus metrics (config ``metrics.port``).

Served by the run database's follower (rlscope_ray.rundb_follow), the process beside
the aggregator on the driver's host, with ``prometheus_client``'s own HTTP
server and registry: a Prometheus (or RL-Insight's Grafana through one)
scrapes ``http://<metrics.host>:<metrics.port>/metrics``. Every figure is the
latest written step's (a gauge), read from figures.jsonl as the follower
looks (every second); the step counters count every step since the run began.
Labels: ``rank`` ("" for the controller and processes without one),
``role``, ``subtask``, ``category`` (the CPU attribution's), ``reason``
(off CPU) and ``detail`` (figures or full). docs/always_on.md lists them.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from . import figures

PREFIX = "rlscope"


class StepMetrics:
    """The run's metrics in a registry of their own; `follow` takes the
    figures lines written since its last call."""

    def __init__(self, registry=None):
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.offset = 0
        self.step = Gauge(f"{PREFIX}_step", "the latest step whose figures were written", registry=r)
        self.steps = Counter(f"{PREFIX}_steps", "steps written, by detail (figures: figures only; full: a trace "
                             "too)", ["detail"], registry=r)
        self.triggered = Counter(f"{PREFIX}_steps_triggered", "steps written in full by a trigger (always_on)",
                                 ["why"], registry=r)
        self.duration = Gauge(f"{PREFIX}_step_duration_ms", "the latest step's time, raw", registry=r)
        self.corrected = Gauge(f"{PREFIX}_step_corrected_ms", "the latest step's time less the profiler's "
                               "overhead (raw when correction is off)", registry=r)
        self.dropped = Gauge(f"{PREFIX}_dropped_events", "events dropped so far by the step's processes",
                             registry=r)
        self.busy = Gauge(f"{PREFIX}_subtask_busy_ms", "a process's CPU-or-GPU busy time in a sub-task's "
                          "windows, the latest step", ["subtask", "rank", "role"], registry=r)
        self.window = Gauge(f"{PREFIX}_subtask_window_ms", "the controller's time in a sub-task, the latest step",
                            ["subtask"], registry=r)
        self.cpu = Gauge(f"{PREFIX}_cpu_ms", "a process's sampled CPU time in the step by category "
                         "(python, backend, cuda_api, simulator, other, profiler)", ["rank", "role", "category"],
                         registry=r)
        self.gpu = Gauge(f"{PREFIX}_gpu_ms", "a process's GPU busy time in the step", ["rank", "role"], registry=r)
        self.off_cpu = Gauge(f"{PREFIX}_off_cpu_ms", "a process's recording threads' time off CPU in the step, "
                             "by why", ["rank", "role", "reason"], registry=r)
        self.rss = Gauge(f"{PREFIX}_rss_mb", "a process's resident memory at the step's end", ["rank", "role"],
                         registry=r)
        self.overhead = Gauge(f"{PREFIX}_overhead_ms", "the profiler's overhead removed from a process in the step",
                              ["rank", "role"], registry=r)
        self.straggler = Gauge(f"{PREFIX}_straggler_ratio", "a sub-task's slowest rank over its median, the latest "
                               "step", ["subtask"], registry=r)

    def observe(self, fig: Dict[str, Any]) -> None:
        """One step's figures line."""
        self.step.set(fig["step"])
        detail = str(fig.get("detail") or "full")
        self.steps.labels(detail).inc()
        if fig.get("trigger"):
            self.triggered.labels(str(fig["trigger"]).split(":", 1)[0]).inc()
        self.duration.set(float(fig.get("duration_ms") or 0.0))
        self.corrected.set(figures.step_ms(fig))
        self.dropped.set(float((fig.get("totals") or {}).get("dropped") or 0))
        # The step's own figures only: a line leaves out what is zero (and
        # sub-tasks past its 16), which must not keep an earlier step's value.
        for g in (self.busy, self.window, self.cpu, self.gpu, self.off_cpu, self.straggler):
            g.clear()
        for p in fig.get("processes") or []:
            who = (_rank(p.get("rank")), str(p.get("role") or ""))
            mem = p.get("memory") or {}
            if mem.get("rss_end_mb") is not None:
                self.rss.labels(*who).set(mem["rss_end_mb"])
            self.overhead.labels(*who).set(float((p.get("overhead") or {}).get("subtracted_ms") or 0.0))
        for row in figures.subtasks(fig):
            who = (_rank(row.get("rank")), str(row.get("role") or ""))
            busy = sum(float(row.get(k) or 0.0) for k in ("cpu_only_ms", "gpu_only_ms", "cpu_gpu_ms"))
            self.busy.labels(row["subtask"], *who).set(busy)
            if row.get("role") == "controller":
                self.window.labels(row["subtask"]).set(float(row.get("window_ms") or 0.0))
            att = row.get("attribution") or {}
            if row["subtask"] != "step":  # the whole step's row: a process's figures
                continue
            for key, ms in att.items():
                if key.endswith("_ms") and key not in ("cpu_ms", "gpu_ms", "idle_ms") and not isinstance(ms, dict):
                    self.cpu.labels(*who, key[:-3]).set(ms)
            self.gpu.labels(*who).set(float(att.get("gpu_ms") or 0.0))
            for reason, ms in (att.get("off_cpu_ms") or {}).items():
                self.off_cpu.labels(*who, reason).set(ms)
        for g in figures.rows(fig.get("stragglers")):
            if g.get("median_ms"):
                self.straggler.labels(g["subtask"]).set(g["slowest_ms"] / g["median_ms"])

    def follow(self, run_dir: str) -> int:
        """Takes figures.jsonl's lines written since the last call; how many."""
        figs, self.offset = figures.read_from(run_dir, self.offset)
        for f in figs:
            self.observe(f)
        return len(figs)


def _rank(rank: Optional[int]) -> str:
    return "" if rank is None else str(rank)


def serve(metrics: StepMetrics, port: int, host: str = "127.0.0.1"):
    """Serves the registry on host:port (a thread of prometheus_client's);
    returns its server (``.server_address`` the bound port: 0 picks one)."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=host, registry=metrics.registry)
    return server
