"""Shared fixtures: the build, a real aggregator daemon, trace readers."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What profiled processes leave on disk at exit when their aggregator is away
# (native/spool_file.h) goes to one directory per test session, not to the
# machine's: every daemon and profiled program the tests start inherits it.
if "RLSCOPE_SPOOL_DIR" not in os.environ:
    import tempfile

    os.environ["RLSCOPE_SPOOL_DIR"] = tempfile.mkdtemp(prefix="rlscope_spool_tests_")
BUILD = Path(os.environ.get("RLSCOPE_BUILD_DIR", "build/py"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD


def clean_env(*drop: str) -> Dict[str, str]:
    """This environment without the profiler (no RLSCOPE_*, no NVTX tool), nor `drop`.
    RLSCOPE_SPOOL_DIR stays: whatever a test's program leaves on disk goes to the session's."""
    return {k: v for k, v in os.environ.items()
            if not (k.startswith("RLSCOPE_") and k != "RLSCOPE_SPOOL_DIR") and k != "NVTX_INJECTION64_PATH"
            and k not in drop}


def run_local_demo(build_dir: Path, tmp_path: Path, config_yaml: str, steps: int = 3,
                   env: Optional[Dict[str, str]] = None):
    """examples/verl/demo_local.py (a controller and three subprocess
    workers, ranks 0-2) under `config_yaml`, into tmp_path/out, with `env`
    over this environment: (its CompletedProcess, the run directory)."""
    cfg = tmp_path / "demo.yaml"
    cfg.write_text(config_yaml)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(ROOT / "examples/verl/demo_local.py"), "--out", str(out), "--steps",
                        str(steps), "--config", str(cfg)],
                       env=dict(os.environ, RLSCOPE_BUILD_DIR=str(build_dir), **(env or {})),
                       capture_output=True, text=True, timeout=180)
    return r, out


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's size=, e.g. "64k") mounted at `path`, a disk
    a test can fill; skips the test where it cannot be mounted (root only)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a full disk is a small tmpfs, which only root can mount")
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)])


@pytest.fixture(scope="session")
def build_dir() -> Path:
    if not (BUILD / "tests" / "apps" / "nvtx_app").exists():
        pytest.fail(f"test programs not built in {BUILD}; run `make build` first")
    return BUILD


@pytest.fixture(scope="session")
def rlscope():
    import rlscope_ray

    return rlscope_ray


class Aggregator:
    """A real `rlscope-ray aggregator` daemon on a free loopback port."""

    def __init__(self, tmp: Path, config: Optional[str], grace_ms: int, exit_when_done: bool, nice: bool = False,
                 prefix: Sequence[str] = (), secret: Optional[str] = None, listen: str = "tcp://127.0.0.1:*",
                 out: Optional[Path] = None, log: Optional[Path] = None, args: Sequence[str] = ()):
        from rlscope_ray.aggregator_process import start_aggregator

        self.out = out or tmp / "out"
        self.log = log or tmp / "aggregator.log"
        self.secret = secret
        cfg = None
        if config is not None:
            cfg = tmp / "aggregator.yaml"
            cfg.write_text(config)
        # prefix: a command to run it under, e.g. unshare into a time namespace.
        # nice: at the lowest priority, as `rlscope-ray calibrate` runs its
        # own, so that on 2 cores it does not slow down what it profiles.
        self._agg = start_aggregator(
            self.out, config=cfg, command=[*prefix, sys.executable, "-m", "rlscope_ray.cli", "aggregator"],
            args=["--grace-ms", str(grace_ms)] + (["--exit-when-done"] if exit_when_done else []) + list(args),
            log=self.log, nice=nice, work_dir=tmp, deadline_s=60,  # a hang guard, not a timing
            listen=listen, secret=secret)
        self.proc = self._agg.proc
        self.endpoint = self._agg.endpoint

    def env(self, role: str = "worker", rank: Optional[int] = None, config: Optional[str] = None,
            inject: bool = True) -> Dict[str, str]:
        import rlscope_ray

        env = dict(os.environ)
        for k in list(env):
            if (k.startswith("RLSCOPE_") and k != "RLSCOPE_SPOOL_DIR") or k in ("NVTX_INJECTION64_PATH", "RANK"):
                del env[k]
        env["RLSCOPE_AGGREGATOR"] = self.endpoint
        env["RLSCOPE_ROLE"] = role
        if self.secret:
            env["RLSCOPE_SECRET"] = self.secret
        if rank is not None:
            env["RLSCOPE_RANK"] = str(rank)
        if config is not None:
            env["RLSCOPE_CONFIG"] = config
        if inject:
            env["NVTX_INJECTION64_PATH"] = rlscope_ray.collector_path()
        return env

    def wait(self, timeout: float = 30) -> str:
        self._agg.stop(timeout, term_timeout=10)
        return self.log.read_text()

    def stop(self) -> str:
        self._agg.stop(0, term_timeout=20)
        return self.log.read_text()


@pytest.fixture
def aggregator_factory(tmp_path):
    started: List[Aggregator] = []

    def make(config: Optional[str] = None, grace_ms: int = 3000, exit_when_done: bool = True, nice: bool = False,
             prefix: Sequence[str] = (), **kw):
        agg = Aggregator(tmp_path, config, grace_ms, exit_when_done, nice, prefix, **kw)
        started.append(agg)
        return agg

    yield make
    for agg in started:
        if agg.proc.poll() is None:
            agg.proc.kill()
            agg.proc.wait()


class Trace:
    """A step's trace.json, indexed the way a user reads it in Perfetto."""

    def __init__(self, path: Path):
        self.data = json.loads(path.read_text())
        self.events = self.data["traceEvents"]
        self.process_names = {e["pid"]: e["args"]["name"] for e in self.events
                              if e["ph"] == "M" and e["name"] == "process_name"}
        self.thread_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in self.events
                             if e["ph"] == "M" and e["name"] == "thread_name"}

    def pid_of(self, label_part: str) -> int:
        pids = [p for p, n in self.process_names.items() if label_part in n]
        assert len(pids) == 1, f"{label_part!r} matches {pids} in {self.process_names}"
        return pids[0]

    def slices(self, pid: int, name: Optional[str] = None, samples: bool = False) -> List[dict]:
        """Its X slices: ranges, Ray methods, GPU records; with `samples`, the
        samplers' tracks instead (cat cpu_samples: CPU categories; off_cpu:
        why a thread waited)."""
        from rlscope_ray import _native

        cats = (_native.names.CAT_CPU_SAMPLES, _native.names.CAT_OFF_CPU)
        return [e for e in self.events if e["ph"] == "X" and e["pid"] == pid
                and (name is None or e["name"] == name) and (e.get("cat") in cats) == samples]

    def asyncs(self, pid: int, name: str) -> List[dict]:
        """(begin, end) pairs of async ranges, as one dict each."""
        begins = {e["id"]: e for e in self.events if e["ph"] == "b" and e["pid"] == pid and e["name"] == name}
        ends = {e["id"]: e for e in self.events if e["ph"] == "e" and e["pid"] == pid and e["name"] == name}
        assert begins.keys() == ends.keys()
        return [{"b": begins[i], "e": ends[i], "dur": float(ends[i]["ts"]) - float(begins[i]["ts"])} for i in begins]

    def instants(self, pid: int, name: str) -> List[dict]:
        return [e for e in self.events if e["ph"] == "i" and e["pid"] == pid and e["name"] == name]
