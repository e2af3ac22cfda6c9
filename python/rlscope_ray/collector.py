"""This process's collector: where its library and the aggregator daemon
are, starting it from the environment (done when ``rlscope_ray`` is
imported), calibrating and stopping it. Re-exported by ``rlscope_ray``;
the package's own modules import it from here, never from the package
(which imports them)."""
from __future__ import annotations

import os
import sys

from . import _native

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def collector_path() -> str:
    """Absolute path of the collector library (for NVTX_INJECTION64_PATH)."""
    return os.path.join(_PKG_DIR, "librlscope_collector.so")


def aggregator_path() -> str:
    """Absolute path of the aggregator daemon binary."""
    return os.path.join(_PKG_DIR, "bin", "rlscope-ray-aggregator")


def start_collector() -> bool:
    """Start this process's collector from the environment, if not running.

    Done at import; call it again after setting RLSCOPE_AGGREGATOR (and the
    other RLSCOPE_* variables) later. Idempotent; True when a collector runs.
    """
    global _calibrated
    running = bool(_native.init())
    if running:
        # The collector claimed the profiler's environment for this process
        # (C setenv); Python's copy too, for children started with
        # env=dict(os.environ): they are profiled as this process's children
        # (config `children`), never as it.
        os.environ[_native.names.ENV_OWNER_PID] = str(os.getpid())
    if running and not os.environ.get("NVTX_INJECTION64_PATH"):
        # NVTX reads this at each library's first NVTX call: from now on the
        # `nvtx` package and torch.cuda.nvtx report into this same collector.
        os.environ["NVTX_INJECTION64_PATH"] = collector_path()
    if running:
        # With this collector attached the `nvtx` package reads colour names,
        # and fails on most without matplotlib: never let that crash the host.
        from .nvtx_colors import make_colour_names_safe

        make_colour_names_safe()
        # The `nvtx` package's calls through rlscope's entry points (the
        # same events, a fraction of the caller-side cost): nvtx_fast.
        from . import nvtx_fast

        nvtx_fast.install(collector_path())
    if running and not _calibrated:
        # Overhead correction: the caller-side cost of Python annotations
        # (rlscope_ray.calibration), once per process (again while the
        # `nvtx` package is missing, as it may be installed later). It reads
        # the package's internals: if they changed, profile without it.
        from . import calibration

        try:
            _calibrated = bool(calibration.calibrate_python())
        except Exception as e:  # noqa: BLE001 - never fail the host's import
            _calibrated = True
            print(f"rlscope: could not calibrate the `nvtx` package's overhead ({type(e).__name__}: {e}); "
                  "its annotations are not overhead-corrected", file=sys.stderr)
    return running


_calibrated = False


def calibrate() -> dict:
    """Re-measure the per-event overhead costs of this process (the collector's
    own, per record kind, and the Python annotations'); returns the latter.
    Done once at start-up; call again after the workload's mix changed."""
    _native.calibrate()
    from . import calibration

    return calibration.calibrate_python()


def shutdown_collector() -> None:
    """Flush and stop this process's collector (also done at exit)."""
    from . import calibration

    calibration.stop_watch()  # no figures given to a collector that stopped
    _native.shutdown()
