"""The CPU sampler's Python frame reader (python/bindings/py_frame.c) on every
CPython it supports that this machine has: built against each interpreter's
own headers, it must read the module of the running frame, from a function,
a generator, a coroutine, a method called from C (sorted's key), and module
level code (3.12 on; 3.11 gives module code's frames no module name). The signal-handler side (pointer checks against readable memory,
the module table) is tests/test_attribution.py's."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT

PROBE = r'''
import sys
sys.path.insert(0, sys.argv[1])
import py_frame_probe as p
import types
mod = types.ModuleType("rlscope_probe.sim")
exec(compile("""
import py_frame_probe as p
def plain():
    return p.current_module()
def gen():
    yield p.current_module()
async def coro():
    return p.current_module()
class K:
    def key(self, x):
        self.seen = p.current_module()
        return x
""", "<probe>", "exec"), mod.__dict__)
assert mod.plain()[0] == "rlscope_probe.sim", mod.plain()
assert next(mod.gen())[0] == "rlscope_probe.sim"
c = mod.coro()
try:
    c.send(None)
except StopIteration as done:
    assert done.value[0] == "rlscope_probe.sim", done.value
k = mod.K()
sorted([2, 1], key=k.key)
assert k.seen[0] == "rlscope_probe.sim", k.seen
# Module level code: 3.12 on give its function the module's name; 3.11 none
# (the sample then counts by its shared object alone: the interpreter).
assert p.current_module()[0] == ("" if sys.version_info < (3, 12) else "__main__"), p.current_module()
print(p.current_module()[1])
'''


def _interpreters():
    """(version, executable) of each CPython 3.11 to 3.13 found here: this
    one, and pyenv's or the system's others."""
    found = {f"{sys.version_info.major}.{sys.version_info.minor}": sys.executable}
    candidates = glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[123]*/bin/python3"))
    candidates += [p for p in (shutil.which(f"python3.{m}") for m in (11, 12, 13)) if p]
    for exe in candidates:
        r = subprocess.run([exe, "-c", "import sys, sysconfig; print('%d.%d' % sys.version_info[:2]); "
                                       "print(sysconfig.get_paths()['include'])"], capture_output=True, text=True)
        if r.returncode == 0:
            version, include = r.stdout.split()
            if os.path.exists(os.path.join(include, "internal", "pycore_frame.h")):
                found.setdefault(version, exe)
    return sorted(found.items())


@pytest.mark.parametrize("version,exe", _interpreters())
def test_the_frame_reader_reads_the_running_frames_module(version, exe, tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    r = subprocess.run([exe, "-c", "import sysconfig; print(sysconfig.get_paths()['include']); "
                                   "print(sysconfig.get_config_var('EXT_SUFFIX'))"], capture_output=True, text=True)
    include, suffix = r.stdout.split()
    out = tmp_path / f"py_frame_probe{suffix}"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", f"-I{include}", f"-I{ROOT}",
                    str(ROOT / "python/bindings/py_frame.c"), str(ROOT / "tests/apps/py_frame_probe.c"), "-o",
                    str(out)], check=True, timeout=120)
    run = subprocess.run([exe, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"CPython {version}"
