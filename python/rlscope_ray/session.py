"""The driver's profiling session: rlscope_ray.init() / rlscope_ray.shutdown().

init() validates the config, starts the aggregator as a child process (or uses
an explicit endpoint), registers the "rlscope" plugin before it starts a local
Ray (or checks that an existing cluster's nodes have it), puts the job's
defaults into the job's env_vars, and makes this driver the controller (with
profile_driver=False the driver is not profiled, and the process that runs the
steps claims the role: become_controller, as verl's TaskRunner does).
shutdown() (also run at exit) reports which profiled actors never connected,
says goodbye, waits for the aggregator to write the last steps, and stops Ray
if init() started it.
"""
from __future__ import annotations

import atexit
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from . import _native, settings
from .aggregator_process import AggregatorProcess, AggregatorStartError, start_aggregator
from .ray_plugin import PLUGIN_SPEC
from .relay import RELAYS


@dataclass
class Session:
    endpoint: str
    output_dir: str
    config: Dict[str, Any]
    aggregator: Optional[subprocess.Popen] = None
    aggregator_log: Optional[str] = None
    started_ray: bool = False
    unregistered_nodes: List[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _reporter: Optional[threading.Thread] = None
    _wake: threading.Event = field(default_factory=threading.Event)
    _expected_lock: threading.Lock = field(default_factory=threading.Lock)
    _expected_sent: Optional[List[Dict[str, str]]] = None
    # Actors this process created (_count_actor_creations) and how many it
    # had created at the reporter's last look at Ray's actor table; since
    # when looks have found actors of the cluster still starting (None: the
    # last found none).
    _actors_created: int = 0
    _actors_looked: int = 0
    _starting_since: Optional[float] = None
    # When a look last found something new (the list it sends changed,
    # actors starting, one created here since the look before); None before
    # the first look. Sets the reporter's pace (_report_interval).
    _changed_at: Optional[float] = None
    _aggregator: Optional[AggregatorProcess] = None
    profile_driver: bool = True
    ray_context: Any = None  # what ray.init returned
    # The run's secret: the aggregator takes hellos that carry it only. Made
    # here when init starts the aggregator; with an existing aggregator, the
    # RLSCOPE_SECRET it was started with (from this environment), if any.
    secret: str = ""
    local: bool = False  # a new local Ray: the aggregator listens on loopback only
    relays: List[Any] = field(default_factory=list)  # rlscope_ray.relay.RelayActor handles, one per host


_session: Optional[Session] = None
_duties: Optional[Session] = None  # the session whose controller duties run here (_start_controller_duties)
_ended = False  # a process's collector cannot restart once shut down
_lock = threading.Lock()


def current() -> Optional[Session]:
    return _session


def init(config: Union[str, Dict[str, Any], None] = None, *, address: Optional[str] = None,
         aggregator: Optional[str] = None, output_dir: Optional[str] = None,
         runtime_env: Optional[Dict[str, Any]] = None, profile_driver: bool = True,
         aggregator_nice: int = 10, relays: str = "auto", **ray_init_kwargs: Any) -> Session:
    """Start profiling this Ray job; see the module docstring.

    config: a YAML path, a dict of config keys, or None (defaults).
    address: None starts a new local Ray with the plugin registered; an
        address (or "auto") joins an existing cluster, whose nodes must have
        the plugin registered (RAY_RUNTIME_ENV_PLUGINS before `ray start`).
    aggregator: an existing aggregator's endpoint instead of a child process.
    runtime_env: the job's runtime_env; its "rlscope" value (if any) becomes
        the default under every actor's own "rlscope" value.
    profile_driver: False leaves this driver unprofiled: the controller is
        the process whose steps drive the run (it claims the role at its
        first step, become_controller), as verl's TaskRunner actor does.
    aggregator_nice: the aggregator this starts runs this much nicer than
        the driver (0-19; default 10), so that on a busy node it takes CPU
        from the job only when the job leaves some. It does not drop what
        it cannot read at once: collectors keep it in their spools.
    relays: "auto" (default): when the cluster spans more than one host, a
        relay per host (rlscope_ray.relay: a Ray actor pinned to the host)
        takes the host's profiled workers and forwards to the aggregator over
        one connection; "on": a relay on every host, even one; "off": every
        collector connects to the aggregator itself.
    """
    global _session
    with _lock:
        if _session is not None:
            return _session
        _check_init(relays, aggregator_nice)
        job_env = dict(runtime_env or {})
        # The run's config, made once here: the driver (the controller), the
        # aggregator and every actor get this one (README "One config per run").
        cfg = settings.run_config(_config_layers(config), job_env.get("rlscope"))
        out = os.path.abspath(output_dir or cfg.get("output_dir") or "rlscope_out")
        endpoint = settings.endpoint([aggregator], cfg)
        session = Session(endpoint=endpoint or "", output_dir=out, config=cfg, profile_driver=profile_driver,
                          secret=os.environ.get(settings.SECRET, "") if endpoint else secrets.token_hex(16),
                          local=address is None)
        if not endpoint:
            _start_aggregator(session, aggregator_nice)
        _start_ray(session, address, _job_runtime_env(session, job_env), ray_init_kwargs)
        _start_relays(session, relays)
        if profile_driver:
            _profile_driver(session)
        _session = session
        atexit.register(shutdown)
        return session


def _check_init(relays: str, aggregator_nice: int) -> None:
    """Refuses init() before anything starts: a second run in this process,
    a Ray started by someone else, bad arguments."""
    import ray

    if _ended:
        raise RuntimeError("rlscope_ray.init() runs once per process: this process's collector was shut "
                           "down by rlscope_ray.shutdown() and cannot record again; profile the next run "
                           "from a new driver process")
    if ray.is_initialized():
        raise RuntimeError("rlscope_ray.init() starts or joins Ray itself: call it instead of ray.init() "
                           "(or call ray.shutdown() first)")
    if relays not in RELAYS:
        raise ValueError(f"rlscope_ray.init(relays=...) must be one of {', '.join(RELAYS)}, got {relays!r}")
    if isinstance(aggregator_nice, bool) or not isinstance(aggregator_nice, int) or \
            not 0 <= aggregator_nice <= 19:
        raise ValueError(f"rlscope_ray.init(aggregator_nice=...) must be an int from 0 to 19, got "
                         f"{aggregator_nice!r}")


def _job_runtime_env(session: Session, job_env: Dict[str, Any]) -> Dict[str, Any]:
    """The job's runtime_env with what every profiled actor's plugin reads:
    the endpoint, the run's config, the job's "rlscope" value, the secret."""
    env_vars = dict(job_env.get("env_vars") or {})
    env_vars[settings.JOB_AGGREGATOR] = session.endpoint
    env_vars[settings.JOB_CONFIG] = json.dumps(session.config, sort_keys=True)
    if job_env.get("rlscope") is not None:
        env_vars[settings.JOB_DEFAULTS] = json.dumps(job_env["rlscope"], sort_keys=True)
    if session.secret:
        env_vars[settings.JOB_SECRET] = session.secret
    return {**job_env, "env_vars": env_vars}


def _start_ray(session: Session, address: Optional[str], job_env: Dict[str, Any], kwargs: Dict[str, Any]) -> None:
    """Starts a local Ray with the plugin (address None) or joins a cluster,
    warning about nodes without the plugin."""
    import ray

    # This driver is the profiled process, whatever it inherited: Ray's
    # processes started from here inherit the claim and are not profiled
    # (the plugin clears it for each profiled worker).
    os.environ[settings.OWNER_PID] = str(os.getpid())
    if address is None:
        _register_plugin_for_local_cluster()
        session.started_ray = True
    try:
        # address=None starts a new local Ray (never silently joins one
        # running on this machine, whose nodes may lack the plugin).
        session.ray_context = ray.init(address="local" if address is None else address, runtime_env=job_env,
                                       **kwargs)
    except Exception:
        _stop_aggregator(session, timeout=0)
        raise
    if address is not None:
        session.unregistered_nodes = _nodes_without_plugin()
        for node in session.unregistered_nodes:
            warnings.warn(
                f"rlscope: Ray node {node} does not have the rlscope plugin registered, so actors there "
                "are not profiled (they are listed as not profiled in the summaries). Start every node with "
                f"RAY_RUNTIME_ENV_PLUGINS='{json.dumps([PLUGIN_SPEC])}' before `ray start`.", stacklevel=4)


def _profile_driver(session: Session) -> None:
    """This driver records as the run's controller."""
    import ray

    ctx = ray.get_runtime_context()
    os.environ.update({
        settings.AGGREGATOR: session.endpoint,
        settings.SECRET: session.secret,
        settings.ROLE: _native.names.CONTROLLER,
        settings.CONFIG: json.dumps(session.config, sort_keys=True),
        _native.names.ENV_LABEL_PREFIX + "NODE_ID": ctx.get_node_id(),
        _native.names.ENV_LABEL_PREFIX + "NODE_IP": ray.util.get_node_ip_address(),
        _native.names.ENV_LABEL_PREFIX + "JOB_ID": ctx.get_job_id(),
    })
    from .collector import start_collector

    start_collector()
    _start_controller_duties(session)


def shutdown(timeout_s: float = 60.0) -> Optional[str]:
    """Finish the session: the run directory is complete when this returns.

    Returns the run directory (None when no session was running).
    """
    global _session, _ended
    import ray

    with _lock:
        session, _session = _session, None
        if session is None:
            return None
        _ended = True
        session._stop.set()
        session._wake.set()
        if session._reporter is not None:
            session._reporter.join(timeout=5)
        if ray.is_initialized() and session is _duties:
            _report_expected(session)
        from .collector import shutdown_collector

        shutdown_collector()  # flush and goodbye: the aggregator writes the last steps
        if session.aggregator is not None and ray.is_initialized():
            _collect_spool_files(session)  # what processes on other nodes left at exit
        # It exits by itself once the controller said goodbye. A controller
        # actor says it only when Ray stops it, after this: a step is written
        # once its flush barrier is answered, milliseconds after it closed, so
        # after a second what is still pending is written as it is (SIGTERM).
        _stop_aggregator(session, timeout=timeout_s if session.profile_driver else min(timeout_s, 1.0))
        _stop_relays(session)
        if session.output_dir and os.path.isdir(session.output_dir):
            # <out>/report.html: the run's steps at a glance (rlscope_ray.report).
            from . import report

            try:
                report.write_report(session.output_dir)
            except Exception as e:  # a report must never fail the job
                print(f"rlscope: could not write the report in {session.output_dir}: {e}", file=sys.stderr)
            _say_losses(session.output_dir)
        if session.started_ray and ray.is_initialized():
            ray.shutdown()
        return session.output_dir


# ---------------------------------------------------------------- helpers


def _collect_spool_files(session: Session, timeout_s: float = 30.0) -> None:
    """What profiled processes on other hosts left on their disk at exit when
    the aggregator could not take it (native/spool_file.h): one Ray task per
    host reads and removes the run's spool files there, and they are written
    into this host's spool directory, which the aggregator takes up before it
    finishes. A host that cannot be reached keeps its files (said; `rlscope-ray
    recover` on that host takes them)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from . import _native

    if not session.secret:
        return
    here = ray.util.get_node_ip_address()
    hosts: Dict[str, str] = {}
    for node in ray.nodes():
        if node.get("Alive") and node["NodeManagerAddress"] != here:
            hosts.setdefault(node["NodeManagerAddress"], node["NodeID"])
    if not hosts:
        return
    key = _native.run_key(session.secret)
    take = ray.remote(num_cpus=0)(_take_spool_files)
    refs = {host: take.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(key)
            for host, node in hosts.items()}
    local_dir = _native.spool_dir(key)
    for host, ref in refs.items():
        try:
            files = ray.get(ref, timeout=timeout_s)
        except Exception as e:  # a host gone: its files stay there
            print(f"rlscope: could not collect what processes left on {host} at exit: {e}", file=sys.stderr)
            continue
        if files:
            os.makedirs(local_dir, mode=0o700, exist_ok=True)
        for name, data in files:
            tmp = os.path.join(local_dir, name + ".tmp")
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(local_dir, name))  # whole, as the aggregator expects


def _take_spool_files(key: str) -> List[Any]:
    """On a host: the run's spool files there, (name, bytes), removed."""
    from . import _native

    d = _native.spool_dir(key)
    out = []
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if name.endswith(".spool"):
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                out.append((name, f.read()))
            os.unlink(path)
    return out



def _start_relays(session: Session, relays: str) -> None:
    """One relay per host (rlscope_ray.relay) when `relays` asks for them; a
    relay that cannot start leaves its host's collectors on the aggregator,
    said once, never failing init."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from .relay import RelayActor

    if relays == "off" or not session.endpoint:
        return
    hosts: Dict[str, str] = {}  # host address -> a node there with the plugin
    for node in ray.nodes():
        if node.get("Alive") and node["NodeID"] not in session.unregistered_nodes:
            hosts.setdefault(node["NodeManagerAddress"], node["NodeID"])
    if relays == "auto" and len(hosts) < 2:
        return
    actor = ray.remote(num_cpus=0, max_restarts=0)(RelayActor)
    try:
        session.relays = [actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                                        runtime_env={"rlscope": {"enabled": False}}).remote(session.endpoint,
                                                                                            session.secret)
                          for node_id in hosts.values()]
        ray.get([r.endpoint.remote() for r in session.relays], timeout=60)
    except Exception as e:  # noqa: BLE001 - the run works without relays
        print(f"rlscope: relays not started ({type(e).__name__}: {e}); every collector connects to the aggregator "
              "itself", file=sys.stderr)
        _stop_relays(session)
        return
    print(f"rlscope: {len(session.relays)} relay(s), one per host: collectors there connect to it",
          file=sys.stderr)


def _stop_relays(session: Session) -> None:
    """After the aggregator: what the relays held for it went first."""
    import ray

    relays, session.relays = session.relays, []
    if not relays or not ray.is_initialized():
        return
    try:
        ray.get([r.stop.remote() for r in relays], timeout=30)
    except Exception:  # noqa: BLE001 - gone already
        pass
    for r in relays:
        ray.kill(r)


def _say_losses(output_dir: str) -> None:
    """One line on the driver's console: the steps written and every loss."""
    from . import report

    try:
        with open(os.path.join(output_dir, "run.json")) as f:
            run = json.load(f)
    except (OSError, ValueError) as e:
        print(f"rlscope: {output_dir}/run.json cannot be read ({e})", file=sys.stderr)
        return
    written = run.get("steps_written") or []
    losses = report.loss_line(run)
    print(f"rlscope: {len(written)} steps written to {output_dir}; "
          + (f"losses: {losses}" if losses else "nothing lost"), file=sys.stderr)
    if not written:  # never a silent empty run: the aggregator's reason
        for note in run.get("config_notes") or []:
            if isinstance(note, str) and note.startswith("no step written"):
                print(f"rlscope: {note}", file=sys.stderr)


def _config_layers(config: Union[str, Dict[str, Any], None]) -> List[settings.Layer]:
    """init's ``config`` as config layers (settings.merge)."""
    if config is None:
        return []
    if isinstance(config, dict):
        settings.check_value(dict(config))  # names the bad key
        return [settings.dict_layer(config, "rlscope_ray.init(config=...)")]
    return [settings.file_layer(os.fspath(config))]


def _start_aggregator(session: Session, nice: int) -> None:
    import ray

    os.makedirs(session.output_dir, mode=0o700, exist_ok=True)
    # A new local Ray runs on this machine only: loopback. Joining a cluster,
    # other nodes connect: every interface, the secret keeping strangers out.
    listen, host = ("tcp://127.0.0.1:*", None) if session.local else ("tcp://0.0.0.0:*",
                                                                       ray.util.get_node_ip_address())
    try:
        agg = start_aggregator(session.output_dir, config=session.config, listen=listen,
                               args=["--exit-when-done", "--exit-with-parent"],
                               log=os.path.join(session.output_dir, "aggregator.log"),
                               connect_host=host, secret=session.secret, nice=nice)
    except AggregatorStartError as e:
        raise AggregatorStartError(f"rlscope: {e}") from None
    session._aggregator = agg
    session.aggregator, session.aggregator_log, session.endpoint = agg.proc, agg.log_path, agg.endpoint


def _stop_aggregator(session: Session, timeout: float) -> None:
    if session._aggregator is not None:
        session._aggregator.stop(timeout)


def _register_plugin_for_local_cluster() -> None:
    """The raylet (and its runtime-env agent) inherit this when ray.init()
    starts a local cluster; Ray reads it nowhere else."""
    current_specs = json.loads(os.environ.get("RAY_RUNTIME_ENV_PLUGINS") or "[]")
    if not any(s.get("class") == PLUGIN_SPEC["class"] for s in current_specs):
        current_specs.append(PLUGIN_SPEC)
    os.environ["RAY_RUNTIME_ENV_PLUGINS"] = json.dumps(current_specs)


def _nodes_without_plugin() -> List[str]:
    """Runs a tiny probe task on every alive node; a node whose agent does not
    know "rlscope" starts it without the plugin's marker variable."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    def probe() -> Optional[str]:
        return os.environ.get(settings.PLUGIN_MARKER)

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
                          runtime_env={"rlscope": {"enabled": False}}).remote() for n in nodes]
    missing = []
    for n, ref in zip(nodes, refs):
        try:
            marker = ray.get(ref, timeout=120)
        except Exception:
            marker = None
        if marker is None:
            missing.append(f"{n['NodeManagerAddress']} ({n['NodeID'][:8]})")
    return missing


def profiled_actors() -> List[Dict[str, str]]:
    """Alive actors whose runtime_env asks for profiling (internal GCS table;
    the public state API needs the dashboard)."""
    from ray._private import state
    from ray.core.generated import gcs_pb2

    accessor = state.state._connect_and_get_accessor()
    out = []
    for blob in accessor.get_actor_table(None, "ALIVE"):
        a = gcs_pb2.ActorTableData.FromString(blob)
        try:
            env = json.loads(a.serialized_runtime_env or "{}")
        except ValueError:
            continue
        value = env.get("rlscope")
        if value is None or (isinstance(value, dict) and value.get("enabled") is False):
            continue
        out.append({"actor_id": a.actor_id.hex(), "class_name": a.class_name, "name": a.name,
                    "node_id": a.address.node_id.hex() if a.address.node_id else "", "pid": str(a.pid)})
    return out


# Step begins wake the reporter while its looks find actors still starting,
# for at most this long (one whose resources never come would keep it
# reading the table at every step).
_STARTING_ACTORS_S = 60.0
# The reporter's own pace: a look every _REPORT_EVERY_S while the cluster's
# actors change, every _REPORT_SETTLED_S once its looks found nothing new
# for _SETTLE_S. A look reads Ray's actor table four times (the alive
# actors, then three states of starting ones): 0.7-1.0 ms of the GCS's CPU
# and as much of this process's (4 and 16 actors; bench section always_on,
# bench/actor_table_look.py), 1.5-2.0 ms of CPU a second at a look a
# second, the whole run long. An actor another process creates later (or
# this one through a path _count_actor_creations does not see: verl's
# TaskRunner) is seen at the next look: within _REPORT_SETTLED_S (before, a
# second); one this process creates through ActorClass._remote wakes the
# reporter at the next step's begin either way (before_step). Actors still
# starting count as new for _STARTING_ACTORS_S from when the looks first
# found them (one whose resources never come, maybe another job's, would
# keep the pace at a second).
_REPORT_EVERY_S = 1.0
_REPORT_SETTLED_S = 5.0
_SETTLE_S = 30.0


def _report_interval(session: "Session", now: float) -> float:
    """Seconds until the reporter's next look (unless a step's begin wakes it)."""
    changed = session._changed_at
    return _REPORT_EVERY_S if changed is None or now - changed < _SETTLE_S else _REPORT_SETTLED_S


def _actors_starting() -> bool:
    """Whether any actor of the cluster is still starting (internal GCS
    table, as profiled_actors; three reads by state, about 1 ms of wall time
    with none). False when it cannot be read (the reporter's second then)."""
    try:
        from ray._private import state

        accessor = state.state._connect_and_get_accessor()
        return any(accessor.get_actor_table(None, s)
                   for s in ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "RESTARTING"))
    except Exception:  # noqa: BLE001 - internal Ray API: degrade, never break the job
        return False


def before_step() -> None:
    """Called by rlscope_ray.step(): wakes the reporter thread when this
    process created actors since its last look, or while its looks find
    actors still starting (for at most _STARTING_ACTORS_S), so that actors
    are reported while the step they come up in runs (verl's TaskRunner
    creates its workers after it claimed the role, through a path of its
    own). Never blocks the training loop (Ray's actor table is read on that
    thread). Not at every step: a look costs about 0.7-1.0 ms of this
    process's CPU and as much of Ray's GCS (_REPORT_EVERY_S), which at
    every step of the PPO demo (17 a second) was as much CPU as the rest of
    the profiler's."""
    session = _duties
    if session is None:
        return
    starting = session._starting_since
    if session._actors_created != session._actors_looked or (
            starting is not None and time.monotonic() - starting < _STARTING_ACTORS_S):
        session._wake.set()


def _start_controller_duties(session: Session) -> None:
    """What a controller does besides its steps, in a Ray job: marks each
    actor call it makes, and reports which profiled actors should connect."""
    global _duties
    _install_call_marks()
    _count_actor_creations()
    session._reporter = threading.Thread(target=_report_expected_loop, args=(session,),
                                         name=_REPORTER_THREAD, daemon=True)
    session._reporter.start()
    _duties = session


def become_controller() -> bool:
    """This process drives the run's steps (rlscope_ray.step, verl's trainer
    loop): it claims the controller role (the aggregator takes the first
    claimant; False when another process is the run's controller) and, in a
    connected Ray process, takes on the controller's duties. Idempotent."""
    if not _native.claim_controller():
        return False
    if _duties is not None:  # every step after the first
        return True
    import ray

    with _lock:
        if _duties is None and ray.is_initialized():
            _start_controller_duties(_session or Session(endpoint="", output_dir="", config={}))
    return True


def _report_expected(session: Session) -> bool:
    """Sends the profiled-actor list when it changed; False when Ray's actor
    table cannot be read (internal API), which turns the report off."""
    created = session._actors_created  # read first: one created during the look wakes it again
    try:
        now = profiled_actors()
    except Exception as e:  # internal Ray API: degrade, never break the job
        print(f"rlscope: cannot list profiled actors ({e!r}); 'not profiled' reports are off", file=sys.stderr)
        return False
    starting = _actors_starting()
    changed = created != session._actors_looked  # or the list sent (the first look's, always) below
    if not starting:
        session._starting_since = None
    elif session._starting_since is None or created != session._actors_looked:
        session._starting_since = time.monotonic()  # a creation here starts the bound again
    if starting and time.monotonic() - session._starting_since < _STARTING_ACTORS_S:
        changed = True
    session._actors_looked = created
    with session._expected_lock:
        if now != session._expected_sent:
            _native.report_expected(now)
            session._expected_sent = now
            changed = True
    if changed:
        session._changed_at = time.monotonic()
    return True


_call_marks_installed = False
_REPORTER_THREAD = "rlscope-actors"  # the expected-list reporter's name, for the OS (own_thread): traces, top


def _install_call_marks() -> None:
    """Marks each actor call the driver makes ("ray.submit" then "ray.task"
    with the task's key) and each result it gets ("ray.got"), so the
    aggregator can check the aligned clocks against causality: a worker's
    execution of a call lies between its submit and its get. Costs a few
    microseconds per call; marks are recorded only inside capture windows."""
    global _call_marks_installed
    if _call_marks_installed:
        return
    import functools

    import ray
    import ray.actor

    from .ray_worker import task_key

    names = _native.names
    submit, task, got = (_native.intern(n) for n in (names.RAY_SUBMIT, names.RAY_TASK, names.RAY_GOT))
    original_remote = ray.actor.ActorMethod._remote

    @functools.wraps(original_remote)
    def _remote(self, *args, **kwargs):
        _native.mark_payload(submit, 0)  # before the call: the earliest a worker may start
        out = original_remote(self, *args, **kwargs)
        for ref in out if isinstance(out, (list, tuple)) else (out,):
            if isinstance(ref, ray.ObjectRef):
                _native.mark_payload(task, task_key(ref.task_id().hex()))
        return out

    original_get = ray.get

    @functools.wraps(original_get)
    def get(object_refs, *args, **kwargs):
        out = original_get(object_refs, *args, **kwargs)
        for ref in object_refs if isinstance(object_refs, (list, tuple)) else (object_refs,):
            if isinstance(ref, ray.ObjectRef):
                _native.mark_payload(got, task_key(ref.task_id().hex()))  # after: the latest it may end
        return out

    ray.actor.ActorMethod._remote = _remote
    ray.get = get
    _call_marks_installed = True


def _count_actor_creations() -> None:
    """Counts the actors this process creates (Ray's ActorClass._remote, which
    .remote() and .options().remote() both call): a step's begin after one
    wakes the reporter (before_step)."""
    import functools

    import ray.actor

    original = ray.actor.ActorClass._remote
    if getattr(original, "_rlscope_counts", False):
        return

    @functools.wraps(original)
    def _remote(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        finally:
            if _duties is not None:
                _duties._actors_created += 1

    _remote._rlscope_counts = True
    ray.actor.ActorClass._remote = _remote


def _report_expected_loop(session: Session) -> None:
    """At once, then every second (every _REPORT_SETTLED_S once its looks
    found nothing new for _SETTLE_S: _report_interval), and at step begins
    after this process created actors or while actors are starting
    (before_step): a controller that claims the role at its first step may
    run only a few. The
    collector's own thread (own_thread: its CPU is the profiler's in
    samples, and the OS knows it by name)."""
    try:
        _native.own_thread(_REPORTER_THREAD)
    except Exception:  # noqa: BLE001 - naming is not worth failing the report
        pass
    while not session._stop.is_set():
        if not _report_expected(session):
            return
        session._wake.wait(_report_interval(session, time.monotonic()))
        session._wake.clear()
