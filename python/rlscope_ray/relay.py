"""Per-host relays for runs that span hosts (rlscope_ray.init(relays=...)).

One relay per host, a Ray actor pinned to one of the host's nodes, runs
`rlscope-ray-aggregator --relay-to ROOT` on loopback and writes its endpoint
to a host-local file named after the run (relay_file). The plugin, in the
same host's runtime-env agent, points each profiled worker it sets up at
that file's endpoint instead of the root (settings.resolve), so the root
holds one connection per host, not one per process. The relay keeps
nothing: the collectors' spools keep every batch until the root releases
its step, so a relay that dies loses nothing; the actor starts it again on
the same port (supervised), and collectors reconnect by themselves.
Ray's runtime-env agent keeps the context it made for a runtime_env, so a
worker started later with the same runtime_env gets the same endpoint: a
relay that stays gone (after MAX_RESTARTS) leaves those workers waiting in
their spools, each saying so on its stderr.
"""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

from . import _native

RELAYS = ("auto", "on", "off")
MAX_RESTARTS = 10  # then the host's workers go to the aggregator itself


def relay_file(secret: str) -> str:
    """Where this host's relay of the run with `secret` writes its endpoint:
    named by the run's key (native/spool_file.h RunKey, as its spool
    directory is), never by the secret."""
    return os.path.join(tempfile.gettempdir(), f"rlscope-relays-{os.getuid()}", _native.run_key(secret) + ".endpoint")


def host_relay(secret: str) -> Optional[str]:
    """This host's relay endpoint for the run, None when it has none (no
    file, or the relay it names is gone: its process no longer runs)."""
    if not secret:
        return None
    try:
        with open(relay_file(secret), encoding="ascii") as f:
            endpoint, pid = f.read().split()
        os.kill(int(pid), 0)  # still there (a relay killed with its actor leaves its file behind)
    except (OSError, ValueError):
        return None
    return endpoint


class RelayActor:
    """The relay daemon of one host, supervised: started again on the same
    endpoint if it exits before stop(). Created by rlscope_ray.session with
    num_cpus=0, pinned to its node, never profiled itself."""

    def __init__(self, root: str, secret: str) -> None:
        from .collector import aggregator_path

        self._root, self._secret = root, secret
        self._command = [aggregator_path(), "--relay-to", root, "--exit-with-parent"]
        self._stopping = threading.Event()
        self.restarts = 0
        work = tempfile.mkdtemp(prefix="rlscope_relay_")
        self._log = os.path.join(work, "relay.log")
        self._endpoint_file = os.path.join(work, "endpoint")
        self._proc = self._start("tcp://127.0.0.1:*")  # node-local collectors only: loopback
        deadline = time.monotonic() + 30  # a hang guard
        while not os.path.exists(self._endpoint_file):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the relay did not start: {open(self._log).read()[-2000:]}")
            time.sleep(0.02)
        with open(self._endpoint_file, encoding="ascii") as f:
            self._endpoint = f.read().strip()
        self._publish()
        atexit.register(self._unpublish)  # the actor's process ends: its host's workers go to the root
        threading.Thread(target=self._supervise, daemon=True).start()

    def _publish(self) -> None:
        """`endpoint pid` in the host's file for the run (settings.resolve reads it)."""
        path = relay_file(self._secret)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path + ".tmp", "w", encoding="ascii") as f:
            f.write(f"{self._endpoint} {self._proc.pid}\n")
        os.replace(path + ".tmp", path)

    def _unpublish(self) -> None:
        try:
            os.unlink(relay_file(self._secret))
        except OSError:
            pass

    def _start(self, listen: str) -> subprocess.Popen:
        return subprocess.Popen(self._command + ["--listen", listen, "--endpoint-file", self._endpoint_file],
                                stdout=open(self._log, "a"), stderr=subprocess.STDOUT)

    def _supervise(self) -> None:
        while not self._stopping.is_set():
            if self._proc.poll() is not None and not self._stopping.is_set():
                if self.restarts >= MAX_RESTARTS:
                    print(f"rlscope: the relay on this host exited {self.restarts + 1} times; not starting it "
                          "again: this host's new workers connect to the aggregator itself", file=sys.stderr)
                    self._unpublish()
                    return
                print(f"rlscope: the relay on this host exited ({self._proc.returncode}); starting it again on "
                      f"{self._endpoint}", file=sys.stderr)
                self.restarts += 1
                self._proc = self._start(self._endpoint)
                self._publish()  # its new pid
            self._stopping.wait(0.5)

    def endpoint(self) -> str:
        return self._endpoint

    def stats(self) -> dict:
        return {"endpoint": self._endpoint, "restarts": self.restarts, "pid": self._proc.pid}

    def stop(self) -> str:
        """Stops the daemon (what it holds for the root goes first) and
        removes the host's relay file; returns its log's tail."""
        self._stopping.set()
        self._unpublish()
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        with open(self._log) as f:
            return f.read()[-2000:]
