"""The report's "What changed" section: the diff `rlscope-ray diff --report`
kept beside the run (rlscope_ray.diff DIFF_FILE), as facts and a table."""
from __future__ import annotations

from pathlib import Path
from typing import List

from ..diff import DIFF_FILE, MIN_ABS_MS
from .model import _dict, _dicts, _num, _read_json, _table, fmt
from .page import Block, Facts, Para


def changes_section(run_dir: Path) -> List[Block]:
    """The diff kept beside the run (rlscope_ray.diff DIFF_FILE), or nothing."""
    d, _why = _read_json(run_dir / DIFF_FILE)
    if d is None:
        return []
    a, b = d.get("a_steps") or [], d.get("b_steps") or []
    out: List[Block] = [Facts([
        ("A", f"{fmt(d.get('a_run'))}, steps {a[0] if a else '-'}-{a[-1] if a else '-'} ({len(a)})"),
        ("B", f"{fmt(d.get('b_run'))}, steps {b[0] if b else '-'}-{b[-1] if b else '-'} ({len(b)})"),
        ("beyond noise", f"|z| > {_num(d.get('z_crit')) or 0:.2f}: false-positive rate {100 * (_num(d.get('alpha')) or 0):g} % "
                         f"over {fmt(d.get('comparisons'))} comparisons (Bonferroni), and at least "
                         f"{100 * (_num(d.get('min_change')) or 0):g} % and {MIN_ABS_MS} ms")])]
    pace = _dict(d.get("pace"))
    if (_num(pace.get("ratio")) or 1.0) != 1.0:
        out.append(Para(f"common pace: B's times are {_num(pace.get('ratio')):.3f} x A's, every sub-task alike (the "
                        f"median ratio of the {fmt(pace.get('compared'))} compared times; {fmt(pace.get('with_it'))} "
                        f"moved with it beyond noise): a busier or slower machine, or a change that slows everything. "
                        f"The changes below moved beyond it too."))
    rows = []
    step = _dict(d.get("step"))
    if step:
        rows.append(["step time", step.get("a_ms"), step.get("b_ms"), step.get("change_ms"), step.get("z"),
                     "beyond noise" if step.get("beyond_noise") else "within noise"])
    for c in _dicts(d.get("changes")):
        what = f"{c.get('subtask')} {c.get('who')} busy" if c.get("kind") == "busy" else \
            f"{c.get('subtask')} (controller's time)"
        where = "; ".join(", ".join(f"{m.get('name')} {(_num(m.get('change_ms')) or 0):+.2f} ms"
                                    for m in _dicts(c.get(k))) for k in ("categories", "ranges", "kernels")
                          if _dicts(c.get(k)))
        rows.append([what, c.get("a_ms"), c.get("b_ms"), c.get("change_ms"), c.get("z"), where])
    out.append(_table(["what", "A ms", "B ms", "change ms", "z", "where it went"], rows, "diff-table"))
    for m in _dicts(d.get("memory_growth")):
        out.append(Para(f"memory: {fmt(m.get('who'))}: resident memory grows {(_num(m.get('mb_per_step')) or 0):.2f} "
                        f"MB a step (+{(_num(m.get('growth_mb')) or 0):.0f} MB over B's steps)", "warn"))
    return out
