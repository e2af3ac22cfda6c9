"""The subprocess demo (examples/verl/demo_local.py, no Ray): C++ and Python
NVTX workers driven by a controller, merged per step."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT, Trace


def test_subprocess_demo_writes_selected_steps_with_all_processes(build_dir, tmp_path):
    cfg = tmp_path / "demo.yaml"
    cfg.write_text("steps: [2, 3]\nflush: {step_grace_ms: 3000}\n")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(ROOT / "examples/verl/demo_local.py"), "--out", str(out), "--steps", "3",
                        "--config", str(cfg)], env=dict(os.environ, RLSCOPE_BUILD_DIR=str(build_dir)),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "steps written: [2, 3]" in r.stdout
    assert sorted(p.name for p in out.glob("step_*")) == ["step_2", "step_3"]
    trace = Trace(out / "step_3" / "trace.json")
    ctrl = trace.pid_of("(controller)")
    (step,) = trace.slices(ctrl, "step")
    s0, s1 = float(step["ts"]), float(step["ts"]) + float(step["dur"])
    for rank in (0, 1, 2):
        pid = trace.pid_of(f"rank {rank})")
        (update,) = trace.slices(pid, "update_actor")
        # The worker's sub-task sits inside the controller's range that asked for it.
        (ctrl_update,) = trace.slices(ctrl, "update_actor")
        assert float(ctrl_update["ts"]) <= float(update["ts"])
        assert float(update["ts"]) + float(update["dur"]) <= float(ctrl_update["ts"]) + float(ctrl_update["dur"])
        assert s0 <= float(update["ts"]) <= s1
    summary = json.loads((out / "step_3" / "summary.json").read_text())
    assert summary["totals"]["processes"] == 4 and summary["totals"]["dropped"] == 0
