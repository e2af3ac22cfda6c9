"""The `rlscope-ray` command as a user types it."""
from __future__ import annotations

import subprocess
import sys

from conftest import clean_env


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "rlscope_ray.cli", *args], capture_output=True, text=True,
                          timeout=30, **kw)


def test_check_prints_resolved_config(tmp_path):
    cfg = tmp_path / "ok.yaml"
    cfg.write_text("steps: \"2-4\"\nranks: [0, 1]\nflush:\n  step_grace_ms: 100\n")
    r = _cli("check", str(cfg))
    assert r.returncode == 0, r.stderr
    assert "steps: [2, 3, 4]" in r.stdout
    assert "ranks: [0, 1]" in r.stdout
    assert "step_grace_ms: 100" in r.stdout


def test_check_reports_every_error_with_line_numbers(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("output_dir: out\nsteps: \"5-2\"\nranks: [-1]\ncapture_range: sometimes\nstpes: 3\n")
    r = _cli("check", str(cfg))
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert f'{cfg}:2:8: steps: range "5-2" is empty (start 5 > end 2)' in lines
    assert any(l.startswith(f"{cfg}:3:") and "ranks: -1 is negative" in l for l in lines)
    assert any(l.startswith(f"{cfg}:4:") and "capture_range" in l and "cudaProfilerApi" in l for l in lines)
    assert any(l.startswith(f"{cfg}:5:1: stpes: unknown key") and "did you mean 'steps'" in l for l in lines)
    assert "4 errors" in r.stderr


def test_check_keys_lists_defaults():
    r = _cli("check", "--keys")
    assert r.returncode == 0
    assert "buffers.per_thread_kb: 1024" in r.stdout
    assert "flush.step_grace_ms: 5000" in r.stdout


def test_aggregator_bad_listen_endpoint_is_a_clear_error(tmp_path):
    r = _cli("aggregator", "--listen", "nonsense://x", "--out", str(tmp_path))
    assert r.returncode == 2
    assert "cannot listen on 'nonsense://x'" in r.stderr


def test_aggregator_started_with_exit_with_parent_finishes_when_its_parent_dies(tmp_path):
    import json
    import signal
    import time

    parent_code = (
        "import time\n"
        "from rlscope_ray.aggregator_process import start_aggregator\n"
        f"agg = start_aggregator({str(tmp_path / 'out')!r}, args=['--exit-with-parent'], work_dir={str(tmp_path)!r})\n"
        "print(agg.proc.pid, flush=True)\n"
        "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True,
                              env=clean_env())  # no collector in the parent
    aggregator_pid = int(parent.stdout.readline())  # once it listens
    parent.send_signal(signal.SIGKILL)  # the driver dies without shutting anything down
    parent.wait()

    def exited(pid: int) -> bool:  # gone, or a zombie nobody reaps (it ran to its end)
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 300  # a hang's bound, not a timing: it exits on its own
    run_json = tmp_path / "out" / "run.json"
    while not exited(aggregator_pid):  # the aggregator finalises the run and exits on its own
        assert time.monotonic() < deadline, "the aggregator outlived its parent"
        time.sleep(0.1)
    assert json.loads(run_json.read_text())["final"] is True
