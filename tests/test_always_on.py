"""Always on (config always_on, docs/always_on.md): every step's figures in
figures.jsonl and the run database, full traces for the steps chosen up front
and for a step that went wrong; `rlscope-ray diff`; the Prometheus endpoint.

The real run's slowness is virtual, so the slow step is slow whatever the
machine's load: every push and pop costs 0.5 ms on the collector's test
clock (RLSCOPE_TEST_COSTS, a test-only path; correction off, so the trigger
reads the raw time), a normal step records 100 pairs (100 ms) and the slow
one 3,100 (3.1 s), above 3 x the median and the 1 s margin. It also spins
300 ms of its thread's CPU, for the sampler to weigh, then sleeps 600 ms for
the off-CPU looks. What is asserted is
which steps were written in full, never a time: an exact check of the
trigger's rule on a test-only path. The same trigger on the production path
(default config: correction on, the real clock, fast lanes; a step sleeping
1.5 s more) is the bench's (make bench, section always_on). The diff
is checked on constructed runs whose figures differ by a known amount."""
from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import ROOT

DENSE = ROOT / "tests/apps/dense_steps.py"
STEPS, SLOW, CHOSEN = 12, 8, 3


@pytest.fixture(scope="module")
def always_on_run(tmp_path_factory, rlscope):
    """A 12-step run, always on, step 3 chosen up front and step 8 made slow
    (3,000 more push/pop pairs at a virtual 1 ms each)."""
    from rlscope_ray import _native, settings
    from rlscope_ray.aggregator_process import start_aggregator
    from rlscope_ray.collector import collector_path

    work = tmp_path_factory.mktemp("always_on")
    out = work / "out"
    config = {"steps": [CHOSEN], "correction": {"enabled": False}, "cpu": {"sampling_hz": 1000, "off_cpu_hz": 50},
              "always_on": {"enabled": True, "sampling_hz": 100, "slower_than": 3, "min_slower_ms": 1000,
                            "warmup_steps": 2, "memory_jump_mb": 0}}
    agg = start_aggregator(out, config=config, args=["--exit-when-done", "--exit-with-parent"],
                           work_dir=work, database=True)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLSCOPE_")}
        env.update({settings.AGGREGATOR: agg.endpoint, settings.ROLE: _native.names.CONTROLLER,
                    settings.CONFIG: json.dumps(config), "NVTX_INJECTION64_PATH": collector_path(),
                    "RLSCOPE_TEST_COSTS": "push=500000,pop=500000"})
        subprocess.run([sys.executable, str(DENSE), "--steps", str(STEPS), "--ranges", "100", "--style", "push",
                        "--sleep-step", str(SLOW), "--extra-ranges", "3000", "--sleep-ms", "300", "--spin",
                        "--then-sleep-ms", "600"],
                       env=env, check=True, timeout=300,
                       stdout=subprocess.DEVNULL)
        agg.proc.wait(timeout=120)
    finally:
        agg.stop()  # waits for the database's last update
    return out


def test_a_slow_step_is_written_in_full_and_no_other_step_not_chosen(always_on_run):
    from rlscope_ray import figures

    out = always_on_run
    run = json.loads((out / "run.json").read_text())
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("step_")) == [f"step_{CHOSEN}", f"step_{SLOW}"]
    assert run["steps_written"] == [CHOSEN, SLOW]
    assert run["steps_triggered"] == [SLOW]
    assert run["steps_figures_only"] == STEPS - 2
    figs = figures.load(str(out))
    assert sorted(figs) == list(range(1, STEPS + 1))  # every step has its figures
    assert {n: f["detail"] for n, f in figs.items() if f["detail"] == "full"} == {CHOSEN: "full", SLOW: "full"}
    assert figs[CHOSEN]["trigger"] is None  # chosen up front, not triggered
    assert figs[SLOW]["trigger"].startswith(f"slow: ") and "x the median of the" in figs[SLOW]["trigger"]
    # The slow step in full: its trace holds its ranges, as a chosen step's does.
    trace = json.loads((out / f"step_{SLOW}" / "trace.json").read_text())
    assert sum(1 for e in trace["traceEvents"] if e.get("name") == "op" and e.get("ph") == "X") == 100 + 3000
    # Step 8 was not chosen: the sampler ran at always_on.sampling_hz (100):
    # every sample weighs 10 ms or more (more when the kernel delivered one
    # late); the label says both rates.
    runs = [e["args"] for e in trace["traceEvents"] if e.get("cat") == "cpu_samples" and e.get("ph") == "X"]
    assert runs and all(a["cpu_ms"] >= 10 * a["samples"] - 1e-6 for a in runs), runs[:5]
    # Its off-CPU looks at the 600 ms asleep came at the sampler's reduction
    # of cpu.off_cpu_hz (50 x 100 / 1000: 5 Hz), each weighing the wall time
    # since the look before: 0.9 of its 200 ms period or more (20 ms at the
    # full rate), whatever the load (the looks' own spacing, not a timing).
    # Only the sleep's: a look at a thread that waited for a CPU (cpu_wait)
    # weighs that wait exactly (a soak saw one of 16 ms).
    off = [e["args"] for e in trace["traceEvents"]
           if e.get("cat") == "off_cpu" and e.get("ph") == "X" and e.get("name") == "off CPU: sleep"]
    assert off and all(a["off_cpu_ms"] >= 180 * a["looks"] - 1e-6 for a in off), off[:5]
    summary = json.loads((out / f"step_{SLOW}" / "summary.json").read_text())
    assert summary["trigger"] == figs[SLOW]["trigger"]
    assert "trigger" not in json.loads((out / f"step_{CHOSEN}" / "summary.json").read_text())
    assert "(100 Hz in steps not chosen up front, always_on.sampling_hz)" in summary["processes"][0]["cpu_sampling"]
    # Figures only: the line carries the step's sub-tasks and its processes'
    # top ranges; a few KB per process.
    f = figs[5]
    assert f["detail"] == "figures" and f["processes"][0]["role"] == "controller"
    assert [r[0] for r in f["processes"][0]["ranges"]][:1] == ["step"]
    assert [r[0] for r in f["processes"][0]["ranges"]] == ["step", "op"]
    assert f["processes"][0]["ranges"][1][2] == 100  # its 100 pairs
    for line in (out / "figures.jsonl").read_text().splitlines():
        assert len(line) <= 4096 * len(json.loads(line)["processes"])


def test_every_step_is_a_row_of_the_run_database(always_on_run):
    from rlscope_ray import rundb

    import duckdb

    rundb.update(str(always_on_run))
    con = duckdb.connect(rundb.db_path(str(always_on_run)), read_only=True)
    try:
        rows = con.execute("SELECT step, detail, trigger IS NOT NULL FROM steps ORDER BY step").fetchall()
        spans = dict(con.execute("SELECT step, count(*) FROM spans GROUP BY step").fetchall())
        procs = con.execute("SELECT count(DISTINCT step) FROM processes WHERE role = 'controller'").fetchone()[0]
    finally:
        con.close()
    assert [r[0] for r in rows] == list(range(1, STEPS + 1))
    assert {r[0]: r[1] for r in rows if r[1] == "full"} == {CHOSEN: "full", SLOW: "full"}
    assert [r[0] for r in rows if r[2]] == [SLOW]
    assert set(spans) == {CHOSEN, SLOW}  # ranges only of the steps written in full
    assert procs == STEPS


def test_the_follower_takes_figures_only_steps_at_its_last_look_in_chunks(always_on_run, tmp_path, monkeypatch):
    """While the run goes, the follower's looks take the steps written in
    full only (a figures-only step's rows cost about a millisecond of CPU
    each, beside the job); its last look takes every figures-only step, a
    chunk of figures.jsonl per transaction (here one line each)."""
    import io
    import shutil

    from rlscope_ray import rundb, rundb_follow

    import duckdb

    live = tmp_path / "live"
    shutil.copytree(always_on_run, live)
    (live / "run.duckdb").unlink(missing_ok=True)
    monkeypatch.setattr(rundb, "FIGURES_CHUNK_BYTES", 1)
    standin = subprocess.Popen(["sleep", "300"])  # the aggregator, still running
    seen = []

    def steps_in_the_database():
        con = duckdb.connect(rundb.db_path(str(live)), read_only=True)
        try:
            return [s for (s,) in con.execute("SELECT step FROM steps ORDER BY step").fetchall()]
        finally:
            con.close()

    def between_looks(_interval: float) -> None:
        seen.append(steps_in_the_database())
        standin.kill()  # the aggregator exits: one more look, the last
        standin.wait()

    log = io.StringIO()
    try:
        assert rundb_follow.follow(str(live), standin.pid, log=log, sleep=between_looks) == 0
    finally:
        standin.kill()
        standin.wait()
    assert seen == [[CHOSEN, SLOW]]
    assert steps_in_the_database() == list(range(1, STEPS + 1))
    assert f"rundb: {STEPS - 2} figures-only steps into" in log.getvalue()
    con = duckdb.connect(rundb.db_path(str(live)), read_only=True)
    try:
        offset = con.execute("SELECT value FROM meta WHERE key = 'figures_offset'").fetchone()[0]
    finally:
        con.close()
    assert int(offset) == (live / "figures.jsonl").stat().st_size


def test_a_catch_up_goes_past_a_torn_line_and_keeps_a_steps_last_line(always_on_run, tmp_path, monkeypatch):
    """figures.jsonl as a crashed and restarted aggregator leaves it: a
    torn line first (a chunk of its own here: one line a transaction), then
    the steps, then step 5 again (the restarted one's replay, another
    duration). Every step goes in; step 5 is its last line, once."""
    import shutil

    from rlscope_ray import rundb

    import duckdb

    live = tmp_path / "live"
    shutil.copytree(always_on_run, live)
    (live / "run.duckdb").unlink(missing_ok=True)
    lines = (live / "figures.jsonl").read_text().splitlines(keepends=True)
    (live / "figures.jsonl").write_text('{"step": 1, "torn\n' + "".join(lines))
    monkeypatch.setattr(rundb, "FIGURES_CHUNK_BYTES", 1)
    rundb.update(str(live))
    again = json.loads(next(line for line in lines if json.loads(line)["step"] == 5))
    again["duration_ms"] = 12345.0
    with open(live / "figures.jsonl", "a") as f:
        f.write(json.dumps(again) + "\n")
    assert rundb.update(str(live)) == [5]
    con = duckdb.connect(rundb.db_path(str(live)), read_only=True)
    try:
        steps = [s for (s,) in con.execute("SELECT step FROM steps ORDER BY step").fetchall()]
        five = con.execute("SELECT duration_ms FROM steps WHERE step = 5").fetchall()
        procs = con.execute("SELECT count(*) FROM processes WHERE step = 5").fetchone()[0]
    finally:
        con.close()
    assert steps == list(range(1, STEPS + 1))
    assert five == [(12345.0,)] and procs == len(again["processes"])


def test_a_figures_only_step_has_its_gpu_records(build_dir, tmp_path):
    """A figures-only step has no flush barrier: CUPTI hands its records over
    at the collectors' own flushes, so each worker's kernel (its update_actor
    launches one, tests/apps/gpu_ranks_app.py on the stand-in libcupti) is in
    every step's figures, not only in the step chosen up front."""
    from rlscope_ray import figures

    fake = build_dir / "tests" / "apps" / "librlscope_test_fake_cupti.so"
    if not fake.exists():
        pytest.skip("no CUPTI headers at build time: the stand-in libcupti was not built")
    config = tmp_path / "run.yaml"
    config.write_text("steps: [2]\nalways_on: {enabled: true, slower_than: 0, memory_jump_mb: 0}\n"
                      "flush: {step_grace_ms: 3000}\n")
    work = {r: [["figures_kernel", "gpu", 7, 100, 600 + 100 * r, 1]] for r in (0, 1)}
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(ROOT / "tests/apps/gpu_ranks_app.py"), "--out", str(out),
                        "--config", str(config), "--fake-cupti", str(fake), "--work", json.dumps(work),
                        "--steps", "5"], env=dict(os.environ, RLSCOPE_BUILD_DIR=str(build_dir)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    figs = figures.load(str(out))
    assert sorted(figs) == [1, 2, 3, 4, 5] and [n for n, f in figs.items() if f["detail"] == "full"] == [2]
    for n in (3, 4, 5):  # figures only, each worker's kernel of 0.5 ms (rank 0), 0.6 ms (rank 1)
        kernels = {p["rank"]: p.get("kernels") for p in figs[n]["processes"] if p["role"] == "worker"}
        assert kernels == {0: [["figures_kernel", 0.5, 1]], 1: [["figures_kernel", 0.6, 1]]}, (n, kernels)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_metrics_endpoint_serves_the_latest_steps_figures_to_a_prometheus_client(always_on_run, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from rlscope_ray import figures

    port = _free_port()
    log = tmp_path / "rundb.log"
    # The follower as the aggregator's neighbour runs it, on this test's pid (alive throughout).
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "rlscope_ray.rundb_follow", "follow", str(always_on_run),
                                 "--pid", str(os.getpid()), "--metrics-port", str(port), "--interval", "0.1"],
                                stdout=f, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        families = {}
        for _ in range(300):  # until it serves the last step (a bound on waiting, not an assertion)
            try:
                text = urllib.request.urlopen(url, timeout=5).read().decode()
                families = {m.name: m for m in text_string_to_metric_families(text)}
                if families["rlscope_step"].samples[0].value == STEPS:
                    break
            except (OSError, KeyError, IndexError):
                pass
            time.sleep(0.1)
        assert families, log.read_text()
        assert families["rlscope_step"].samples[0].value == STEPS
        steps = {s.labels["detail"]: s.value for s in families["rlscope_steps"].samples if s.name.endswith("_total")}
        assert steps == {"figures": STEPS - 2, "full": 2}
        triggered = {s.labels["why"]: s.value for s in families["rlscope_steps_triggered"].samples
                     if s.name.endswith("_total")}
        assert triggered == {"slow": 1}
        last = figures.load(str(always_on_run))[STEPS]
        corrected = families["rlscope_step_corrected_ms"].samples[0].value
        assert corrected == pytest.approx(figures.step_ms(last))
        busy = {(s.labels["subtask"], s.labels["role"]): s.value for s in families["rlscope_subtask_busy_ms"].samples}
        assert ("step", "controller") in busy
        assert "rundb: metrics on http://127.0.0.1:" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ---- rlscope-ray diff, on constructed runs.

SUBTASKS = ("gen", "reward", "update_actor")
RANKS = (0, 1, 2, 3)


def _line(step: int, rng: random.Random, slow_rank=None, slow_ms=0.0, grow_rank=None, grow_mb=0.0,
          pace=1.0, gen_ms=0.0) -> dict:
    """A figures.jsonl line: a controller and four workers; each worker busy
    about 10 ms (sd 0.4) in each sub-task; `slow_rank` slow_ms more in
    update_actor, in backend code and its `backward` range; every time
    (but slow_ms) `pace` times as long; `slow_rank` gen_ms more in gen, in
    Python code and no range."""
    procs = [{"session": "c", "label": "controller", "rank": None, "role": "controller", "ranges": [],
              "memory": {"rss_end_mb": 500.0}}]
    for r in RANKS:
        extra = slow_ms if r == slow_rank else 0.0
        procs.append({"session": f"w{r}", "label": f"worker {r}", "rank": r, "role": "worker",
                      "ranges": [["backward", (8.0 + rng.gauss(0, 0.3)) * pace + extra, 1],
                                 ["forward", (5.0 + rng.gauss(0, 0.3)) * pace, 2]],
                      "memory": {"rss_end_mb": 1000.0 + rng.gauss(0, 2) + (grow_mb * step if r == grow_rank else 0)}})
    rows = []
    for t in SUBTASKS:
        rows.append([t, 1, 0, (30.0 + rng.gauss(0, 0.4)) * pace, 0, 0, 0, 30.0, 0.01, None])
        for i, r in enumerate(RANKS, 1):
            base = (10.0 + rng.gauss(0, 0.4)) * pace
            extra = slow_ms if (t == "update_actor" and r == slow_rank) else 0.0
            more_py = gen_ms if (t == "gen" and r == slow_rank) else 0.0
            busy = base + extra + more_py
            att = {"cpu_ms": busy, "python_ms": base * 0.4 + more_py, "backend_ms": base * 0.6 + extra}
            rows.append([t, 1, i, 30.0, busy, 0, 0, 30.0 - busy, 0.01, att])
    return {"step": step, "detail": "figures", "trigger": None, "duration_ms": (100.0 + rng.gauss(0, 1.0)) * pace,
            "reason": "complete", "correction": {"enabled": False}, "processes": procs,
            "subtasks": {"columns": ["subtask", "occurrences", "process", "window_ms", "cpu_only_ms", "gpu_only_ms",
                                     "cpu_gpu_ms", "idle_ms", "overhead_ms", "attribution"], "rows": rows}}


def _write_run(path, lines) -> str:
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"format": "rlscope-ray run v1", "config_yaml": ""}))
    (path / "figures.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_diff_names_the_one_changed_subtask_on_one_rank_first_and_nothing_else(tmp_path):
    from rlscope_ray import diff

    a = _write_run(tmp_path / "a", [_line(n, random.Random(n)) for n in range(1, 61)])
    b = _write_run(tmp_path / "b", [_line(n, random.Random(1000 + n), slow_rank=2, slow_ms=3.0)
                                    for n in range(1, 61)])
    d = diff.compare(diff.select(diff.read_steps(a), None, 0), diff.select(diff.read_steps(b), None, 0))
    assert [(c["kind"], c["subtask"], c["who"]) for c in d["changes"]] == [("busy", "update_actor", "rank 2")]
    (c,) = d["changes"]
    assert c["change_ms"] == pytest.approx(3.0, abs=0.5)
    assert c["categories"][0]["name"] == "backend" and c["categories"][0]["change_ms"] == pytest.approx(3.0, abs=0.5)
    assert c["ranges"][0]["name"] == "backward"
    assert not d["step"]["beyond_noise"]  # the step's time was made no different
    assert d["memory_growth"] == []
    # A/A: the same figures, other seeds: nothing beyond noise.
    a2 = _write_run(tmp_path / "a2", [_line(n, random.Random(5000 + n)) for n in range(1, 61)])
    same = diff.compare(diff.select(diff.read_steps(a), None, 0), diff.select(diff.read_steps(a2), None, 0))
    assert same["changes"] == [] and not same["step"]["beyond_noise"]


def test_diff_names_no_whole_step_range_that_moved_far_more_than_the_change(tmp_path):
    """Rank 2: update_actor 3 ms slower in its `backward` range, gen 1 ms
    slower in Python code and no range. A process's ranges are counted over
    its whole step: backward (+3 ms) is where update_actor's time went, and
    not where gen's did."""
    from rlscope_ray import diff

    a = _write_run(tmp_path / "a", [_line(n, random.Random(n)) for n in range(1, 61)])
    b = _write_run(tmp_path / "b", [_line(n, random.Random(1000 + n), slow_rank=2, slow_ms=3.0, gen_ms=1.0)
                                    for n in range(1, 61)])
    d = diff.compare(diff.select(diff.read_steps(a), None, 0), diff.select(diff.read_steps(b), None, 0))
    by = {(c["subtask"], c["who"]): c for c in d["changes"]}
    assert set(by) == {("update_actor", "rank 2"), ("gen", "rank 2")}
    assert [m["name"] for m in by[("update_actor", "rank 2")]["ranges"]] == ["backward"]
    assert by[("gen", "rank 2")]["ranges"] == []
    assert by[("gen", "rank 2")]["categories"][0]["name"] == "python"


def test_diff_says_a_common_pace_and_names_only_what_moved_beyond_it(tmp_path, capsys):
    """B is A 8 % slower in everything (as two runs of one program on a
    busier machine): that is the common pace, and no sub-task is a change;
    with rank 2's update_actor 3 ms slower on top, that alone is named."""
    from rlscope_ray import diff

    a = _write_run(tmp_path / "a", [_line(n, random.Random(n)) for n in range(1, 61)])
    slower = _write_run(tmp_path / "slower", [_line(n, random.Random(1000 + n), pace=1.08) for n in range(1, 61)])
    d = diff.compare(diff.select(diff.read_steps(a), None, 0), diff.select(diff.read_steps(slower), None, 0))
    assert d["pace"]["ratio"] == pytest.approx(1.08, abs=0.01)
    assert d["pace"]["with_it"] == d["pace"]["compared"] == 15  # every one beyond noise, none beyond the pace
    assert d["changes"] == [] and d["step"]["beyond_noise"]
    both = _write_run(tmp_path / "both", [_line(n, random.Random(2000 + n), pace=1.08, slow_rank=2, slow_ms=3.0)
                                          for n in range(1, 61)])
    assert diff.main([a, both]) == 0
    out = capsys.readouterr().out
    assert "common pace: B's times are 1.0" in out and "x A's, every sub-task alike" in out
    assert diff.main([a, both, "--report"]) == 0
    from rlscope_ray.report import render_report
    page = render_report(both)
    assert "common pace: B&#39;s times are 1.0" in page
    out = capsys.readouterr().out
    changes = [line for line in out.splitlines() if re.match(r"\s+\d+\. ", line)]
    assert len(changes) == 1 and "update_actor rank 2 busy" in changes[0], out
    (beyond,) = re.findall(r"\(([+-][\d.]+) ms beyond the pace", changes[0])
    assert float(beyond) == pytest.approx(3.0, abs=0.5)


def test_diff_of_two_step_ranges_of_one_run_on_the_command_line_and_memory_growth(tmp_path, capsys):
    from rlscope_ray import diff

    lines = [_line(n, random.Random(n)) for n in range(1, 41)]
    lines += [_line(n, random.Random(n), slow_rank=1, slow_ms=2.0, grow_rank=3, grow_mb=2.0) for n in range(41, 81)]
    run = _write_run(tmp_path / "run", lines)
    assert diff.main([run, "--a-steps", "1-40", "--b-steps", "41-80"]) == 0
    out = capsys.readouterr().out
    assert "A: " in out and "steps 1-40 (40 steps)" in out and "steps 41-80 (40 steps)" in out
    changes = [line for line in out.splitlines() if re.match(r"\s+\d+\. ", line)]
    assert len(changes) == 1 and "update_actor rank 1 busy" in changes[0]
    (grows,) = re.findall(r"memory: rank 3: resident memory grows ([\d.]+) MB a step over steps 41-80", out)
    assert float(grows) == pytest.approx(2.0, abs=0.1)  # 2 MB a step, under 2 MB of noise
    assert "memory: rank" not in out.replace("memory: rank 3", "")
    # One run needs both ranges; a bad range says what is wrong.
    assert diff.main([run, "--a-steps", "1-40"]) == 1
    assert diff.main([run, "--a-steps", "9-2", "--b-steps", "1-2"]) == 1
    err = capsys.readouterr().err
    assert "give both --a-steps and --b-steps" in err and 'step range "9-2" is empty' in err.replace("'", '"')


def test_diff_report_section(tmp_path):
    from rlscope_ray import diff
    from rlscope_ray.report import render_report

    a = _write_run(tmp_path / "a", [_line(n, random.Random(n)) for n in range(1, 31)])
    b = _write_run(tmp_path / "b", [_line(n, random.Random(100 + n), slow_rank=0, slow_ms=4.0) for n in range(1, 31)])
    assert diff.main([a, b, "--report"]) == 0
    page = render_report(b)
    assert '<section id="changes"><h2>What changed</h2>' in page
    assert "update_actor rank 0 busy" in page and "backend +" in page

