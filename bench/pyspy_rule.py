"""py-spy's samples scored by the rule that scores ours, so that the two are
compared on the same terms (bench/sampler_bench.py, whole_process_bench.py).

Our rule is AttributionRules::Classify (aggregator/attribution.cc): the native
chain from the interrupted frame outwards names a category by its first
object that a category's patterns match (the profiler's, cuda_api, backend,
simulator), or reaches the interpreter (through system libraries alone: the
interpreter's own work); the module of the innermost Python frame decides
where the chain does not (the profiler's module, then the simulator's, over
a backend object; then backend and cuda_api modules); else python when the
interpreter was reached that way, other otherwise.

A py-spy `record --native --format raw [--threads]` line is one stack, root
first, `;`-separated, then its count: a frame is `name (where)`, `where` a
Python file with its line (`step (rlscope_test_sim.py:13)`), a native
frame's source file with its line where it has debug information
(`rlscope_test_burn (burn.cc:20)`, `PyCFuncPtr_call (_ctypes.c:4201)`), else
its shared object (`clock_gettime (libc.so.6)`, `0x7fe9... ([vdso])`). py-spy
folds the interpreter's evaluation frames into the Python frames, so a Python
frame met on the way out is the interpreter reached. A source file is mapped
to its object by `sources` (a test library's), and CPython's own C sources
(any other `.c`) are the interpreter.
"""
import fnmatch
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

PROFILER_OBJECTS = ("librlscope_collector*", "rlscope_ray")
PROFILER_MODULES = ("rlscope_ray",)
SYSTEM_OBJECTS = ("libc.so*", "libm.so*", "libpthread*", "ld-linux*", "libdl.so*", "librt.so*", "libgcc_s*",
                  "libstdc++*", "linux-vdso*", "libffi*")
# native/config.h's defaults for the lists a bench's config does not set.
DEFAULTS = {"python": ["python*", "libpython*", "*/lib-dynload/*"],
            "cuda_api": ["libcuda.*", "libcudart*", "libcupti*", "libnvidia-*"],
            "backend": [], "simulator": []}
INTERPRETER = "libpython3.so"  # what a Python frame or CPython's C source stands for on the chain

_FRAME = re.compile(r"^(?P<name>.*) \((?P<where>[^()]*)\)$")


def _is_glob(p: str) -> bool:
    return any(c in p for c in "*?[")


def _stem(base: str) -> str:
    s = base[3:] if base.startswith("lib") else base
    return s.split(".")[0]


def matches_object(pattern: str, path: str) -> bool:
    """MatchesObject (attribution.cc), but for the site-packages dotted form."""
    if "/" in pattern:
        return fnmatch.fnmatchcase(path, pattern)
    base = os.path.basename(path)
    return fnmatch.fnmatchcase(base, pattern) or (not _is_glob(pattern) and _stem(base) == pattern)


def matches_module(pattern: str, module: str) -> bool:
    """MatchesModule (attribution.cc)."""
    if not pattern or not module:
        return False
    if _is_glob(pattern):
        return fnmatch.fnmatchcase(module, pattern)
    return module == pattern or module.startswith(pattern + ".")


def _any_object(patterns: Sequence[str], path: str) -> bool:
    return any(matches_object(p, path) for p in patterns)


def _any_module(patterns: Sequence[str], module: str) -> bool:
    return any(matches_module(p, module) for p in patterns)


def parse_line(line: str, threads: bool = True) -> Optional[Tuple[List[Tuple[str, str]], int]]:
    """(frames leaf first as (name, where without its line), count) of a raw
    line, None for a line that is not a stack."""
    stack, _, count = line.rstrip("\n").rpartition(" ")
    if not count.isdigit() or not stack:
        return None
    parts = stack.split(";")
    if threads and parts and parts[0].startswith("thread ("):
        parts = parts[1:]
    frames = []
    for part in reversed(parts):
        m = _FRAME.match(part)
        where = m.group("where") if m else ""
        head, sep, tail = where.rpartition(":")
        frames.append((m.group("name") if m else part, head if sep and tail.isdigit() else where))
    return frames, int(count)


def _is_python(where: str) -> bool:
    return where.endswith(".py") or where.startswith("<frozen")


def _module(where: str) -> str:
    """A Python file's module as py-spy shows the file (its short name)."""
    path = where[:-3] if where.endswith(".py") else where
    module = path.replace("/", ".")
    return module[: -len(".__init__")] if module.endswith(".__init__") else module


def classify(frames: List[Tuple[str, str]], config: Dict[str, List[str]], sources: Dict[str, str]) -> str:
    """The category of one py-spy stack (frames leaf first) by our rule.
    `config`: the run's attribution lists (those it sets replace the
    defaults, as native/config.cc does); `sources`: a native source file's
    base name -> its shared object."""
    rules = {**DEFAULTS, **config}
    module = next((_module(w) for _, w in frames if _is_python(w)), "")
    named, interpreter, system_only = None, False, True
    for _, where in frames:
        if _is_python(where):
            obj = INTERPRETER
        else:
            obj = _object(where, sources)
        for category, patterns in (("profiler", PROFILER_OBJECTS), ("cuda_api", rules["cuda_api"]),
                                   ("backend", rules["backend"]), ("simulator", rules["simulator"])):
            if _any_object(patterns, obj):
                named = category
                break
        if named:
            break
        if _any_object(rules["python"], obj):
            interpreter = system_only
            break
        if not _any_object(SYSTEM_OBJECTS, obj):
            system_only = False
    if named and named != "backend":
        return named
    if _any_module(PROFILER_MODULES, module):
        return "profiler"
    if _any_module(rules["simulator"], module):
        return "simulator"
    if named:
        return named
    if _any_module(rules["backend"], module):
        return "backend"
    if _any_module(rules["cuda_api"], module):
        return "cuda_api"
    return "python" if interpreter else "other"


def leaf_object(frames: List[Tuple[str, str]], sources: Dict[str, str]) -> str:
    """The leaf frame's object (the interrupted instruction's, as our
    "leaf only" column counts it)."""
    where = frames[0][1] if frames else ""
    return INTERPRETER if _is_python(where) else _object(where, sources)


def _object(where: str, sources: Dict[str, str]) -> str:
    """A native frame's shared object: a mapped source file's, CPython's for
    its own C sources, the vDSO by the name the kernel gives it."""
    if where == "[vdso]":
        return "linux-vdso.so.1"
    base = os.path.basename(where)
    return sources.get(base, INTERPRETER if base.endswith(".c") else where)
