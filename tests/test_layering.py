"""The layering the READMEs of aggregator/ and collector/ state, checked on the
source: an include that goes the wrong way, or two files that reach each
other around a loop, fails here (the build alone would take either).

Each folder's files are in layers, lowest first; a file may include its own
layer and those below, never one above, and no loop may form inside a layer.
A new file goes into the table below, in the layer of what it owns."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Files by stem (a .h and its .cc are one), lowest layer first.
LAYERS = {
    "aggregator": [
        ("helpers", "sorting chunk_queue prefault probe_server json_writer trace_sink relay daemon_support "
                    "decode_ahead records intervals time_blocks calibrated_costs"),
        ("timeline parts", "process_names process_view span_store range_pairing record_stores"),
        ("data model", "timeline step_profile context"),
        ("shared rules", "occurrences attribution ray_calls clock_fit clocks process_json"),
        ("analysis results", "step_analysis"),
        ("analyses", "correction step_correction lanes breakdown step_cut subtasks expected triggers"),
        ("units and export", "admission run_config step_scheduler release exporter atomic_file run_json step_trace "
                             "perfetto_trace summary_json figures_json chrome_trace step_files outputs"),
        ("root", "aggregator spool_takeup"),
        ("daemon", "daemon_main relay_main"),
    ],
    "collector": [
        ("leaves", "rlscope_collector test_clock children safe_read proc_self spool cupti_records cupti_api "
                   "sampled_thread native_stack"),
        ("context and transport", "context transport environment"),
        ("recording", "recording"),
        ("units", "arming cost_sampling thread_states cpu_sampler cpu_sampling gpu_queue link memory_sampler "
                  "gpu_activity"),
        ("root", "collector"),
        ("entry points", "c_api nvtx_injection cupti_trigger gpu_tracing flush_thread"),
    ],
}
# The folders each folder may include from (besides itself and the standard library).
MAY_INCLUDE = {"native": {"native"}, "collector": {"collector", "native"}, "aggregator": {"aggregator", "native"}}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).iterdir() if p.suffix in (".h", ".cc", ".c"))


def includes(path: Path) -> list[str]:
    return INCLUDE.findall(path.read_text())


def find_loop(edges: dict[str, set[str]]) -> list[str] | None:
    """One loop of `edges` (a list of nodes, the first again at the end), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state and (loop := visit(m)):
                return loop
        state[n] = 2
        path.pop()
        return None

    for n in sorted(edges):
        if n not in state and (loop := visit(n)):
            return loop
    return None


@pytest.mark.parametrize("folder", sorted(MAY_INCLUDE))
def test_a_folder_includes_only_the_folders_below_it(folder):
    wrong = [f"{p.relative_to(ROOT)} includes {inc}" for p in sources(folder) for inc in includes(p)
             if "/" in inc and (ROOT / inc).exists() and inc.split("/")[0] not in MAY_INCLUDE[folder]]
    assert not wrong, wrong


@pytest.mark.parametrize("folder", sorted(LAYERS))
def test_every_include_goes_down_or_sideways_and_no_loop_forms(folder):
    layer_of = {stem: i for i, (_, stems) in enumerate(LAYERS[folder]) for stem in stems.split()}
    names = [name for name, _ in LAYERS[folder]]
    unplaced = sorted({p.stem for p in sources(folder)} - set(layer_of))
    assert not unplaced, f"{folder}/: {unplaced} in no layer: add each to LAYERS in {Path(__file__).name}"
    edges: dict[str, set[str]] = {}
    upward = []
    for p in sources(folder):
        for inc in includes(p):
            if not inc.startswith(folder + "/"):
                continue
            target = Path(inc).stem
            if target == p.stem:
                continue
            edges.setdefault(p.stem, set()).add(target)
            if layer_of[target] > layer_of[p.stem]:
                upward.append(f"{p.name} ({names[layer_of[p.stem]]}) includes {inc} ({names[layer_of[target]]})")
    assert not upward, upward
    loop = find_loop(edges)
    assert loop is None, f"{folder}/ files include each other around a loop: {' -> '.join(loop)}"


def python_imports(path: Path, package: str) -> set[str]:
    """The package's modules `path` imports, anywhere in it (function-local
    imports included); a name taken from the package itself counts as its
    __init__, unless it is a module of the package."""
    modules = {p.stem for p in path.parent.iterdir() if p.suffix in (".py", ".pyi")}  # _native: its stub
    modules |= {p.name for p in path.parent.iterdir() if p.is_dir()}
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1 and base:
                out.add(base.split(".")[0])
            elif node.level == 1 or (node.level == 0 and base == package):
                out |= {a.name if a.name in modules else "__init__" for a in node.names}
            elif node.level == 0 and base.startswith(package + "."):
                out.add(base.split(".")[1])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == package:
                    out.add("__init__")
                elif a.name.startswith(package + "."):
                    out.add(a.name.split(".")[1])
    out.discard(path.stem)
    return out


def test_the_python_package_has_no_import_loop():
    pkg = ROOT / "python" / "rlscope_ray"
    edges = {p.stem: python_imports(p, "rlscope_ray") for p in pkg.glob("*.py")}
    edges = {k: {m for m in v if m in edges} for k, v in edges.items()}  # subpackages stand apart
    assert edges["__init__"], "the checker read no import of the package's own modules"
    loop = find_loop(edges)
    assert loop is None, f"rlscope_ray modules import each other around a loop: {' -> '.join(loop)}"


def test_the_loop_finder_finds_a_loop_and_none_in_a_dag():
    """The loop finder itself: a loop is found, a DAG has none."""
    assert find_loop({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_loop({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
