"""py-spy's samples scored by the rule that scores ours, so that the two are
compared on the same terms (bench/sampler_bench.py, whole_process_bench.py):
each stack becomes what our sampler would have recorded (the interrupted
frame's shared object, its callers' objects outwards, the innermost Python
frame's module) and goes through AttributionRules::Classify itself
(aggregator/attribution.cc, rlscope_ray._native.classify_cpu_sample).

A py-spy `record --native --format raw [--threads]` line is one stack, root
first, `;`-separated, then its count: a frame is `name (where)`, `where` a
Python file with its line (`step (rlscope_test_sim.py:13)`), a native
frame's source file with its line where it has debug information
(`rlscope_test_burn (burn.cc:20)`, `PyCFuncPtr_call (_ctypes.c:4201)`), else
its shared object (`clock_gettime (libc.so.6)`, `0x7fe9... ([vdso])`). py-spy
folds the interpreter's evaluation frames into the Python frames, so a Python
frame met on the way out is the interpreter reached. A source file is mapped
to its object by `sources` (a test library's), and CPython's own C sources
(any other `.c`) are the interpreter's.
"""
import os
import re
from typing import Dict, List, Optional, Tuple

from rlscope_ray import _native

INTERPRETER = "libpython3.so"  # what a Python frame or CPython's C source stands for on the chain

_FRAME = re.compile(r"^(?P<name>.*) \((?P<where>[^()]*)\)$")


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
    module = (where[:-3] if where.endswith(".py") else where).replace("/", ".")
    return module[: -len(".__init__")] if module.endswith(".__init__") else module


def _object(where: str, sources: Dict[str, str]) -> str:
    """A native frame's shared object: a mapped source file's, CPython's for
    its own C sources, the vDSO by the name the kernel gives it."""
    if where == "[vdso]":
        return "linux-vdso.so.1"
    base = os.path.basename(where)
    return sources.get(base, INTERPRETER if base.endswith(".c") else where)


def chain(frames: List[Tuple[str, str]], sources: Dict[str, str]) -> List[str]:
    """The objects of a stack from the leaf outwards, each run named once,
    up to the interpreter (a Python frame), as our sampler walks them."""
    objects: List[str] = []
    for _, where in frames:
        obj = INTERPRETER if _is_python(where) else _object(where, sources)
        if not objects or objects[-1] != obj:
            objects.append(obj)
        if obj == INTERPRETER:
            break
    return objects


def classify(frames: List[Tuple[str, str]], config: Dict[str, List[str]], sources: Dict[str, str]) -> str:
    """The category of one py-spy stack (frames leaf first) by our rule.
    `config`: the run's attribution lists (those it sets replace the
    defaults); `sources`: a native source file's base name -> its object."""
    objects = chain(frames, sources) or [""]
    module = next((_module(w) for _, w in frames if _is_python(w)), "")
    return _native.classify_cpu_sample(objects[0], module, "\n".join(objects[1:]), config)


def classify_leaf(frames: List[Tuple[str, str]], config: Dict[str, List[str]], sources: Dict[str, str]) -> str:
    """The category by the leaf frame's object alone (the interrupted
    instruction's, as our own "leaf only" figure counts it)."""
    return _native.classify_cpu_sample((chain(frames, sources) or [""])[0], "", "", config)
