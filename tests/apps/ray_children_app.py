"""A Ray job whose actors start processes and run coroutines, profiled
through rlscope_ray.init() at the default `children: all`.

    ray_children_app.py OUT REPORT

- Learner (rank 1) starts, in each of steps 1-3, a `subprocess` child and a
  multiprocessing spawn child; each annotates its work with the `nvtx`
  package ("child_work", "spawn_work") and says its pid. Only step 2 is
  selected: the children of step 2 record, those of steps 1 and 3 do not.
- Agents (an asyncio actor, max_concurrency 8) runs two coroutines that
  interleave their ranges on one thread across awaits, in a fixed order
  (events, not sleeps): A opens, B opens, A closes, B closes; once with
  `rlscope_ray.range`, once with `nvtx.start_range`/`end_range`, and once
  through an `@rlscope_ray.range` async def.
Writes a JSON report (pids) for the test.
"""
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys

import ray

import rlscope_ray

out, report = sys.argv[1], sys.argv[2]
rlscope_ray.init(config={"steps": [2], "flush": {"step_grace_ms": 10000}}, output_dir=out,
                 runtime_env={"rlscope": {}}, num_cpus=2, include_dashboard=False, log_to_driver=False)

CHILD = """
import os, sys, time
import nvtx
with nvtx.annotate(sys.argv[1]):
    end = time.perf_counter() + 0.02
    while time.perf_counter() < end:
        pass
print(os.getpid())
"""


@ray.remote(num_cpus=0)
class Learner:
    def work(self) -> dict:
        sub = subprocess.run([sys.executable, "-c", CHILD, "child_work"], capture_output=True, text=True,
                             check=True)
        ctx = multiprocessing.get_context("spawn")
        # `exec` of the same code: a function of this script cannot be pickled
        # by reference in a Ray worker (its __main__ is Ray's).
        proc = ctx.Process(target=exec, args=(CHILD.replace("sys.argv[1]", "'spawn_work'"), {}))
        proc.start()
        proc.join(60)
        return {"subprocess": int(sub.stdout.split()[-1]), "spawn": proc.pid, "spawn_exit": proc.exitcode,
                "parent": os.getpid()}


@ray.remote(num_cpus=0, max_concurrency=8)
class Agents:
    async def interleave(self, kind: str) -> str:
        """A opens, B opens, A closes, B closes: ranges named <kind>_a, <kind>_b."""
        a_open, b_open, a_closed = asyncio.Event(), asyncio.Event(), asyncio.Event()
        order = []

        async def a():
            with _opened(kind, f"{kind}_a"):
                order.append("a+")
                a_open.set()
                await b_open.wait()
                order.append("a-")
            a_closed.set()

        async def b():
            await a_open.wait()
            with _opened(kind, f"{kind}_b"):
                order.append("b+")
                b_open.set()
                await a_closed.wait()
                order.append("b-")

        await asyncio.gather(a(), b())
        return " ".join(order)

    async def decorated(self) -> int:
        """Two calls of one @rlscope_ray.range async def: the first opens,
        the second opens, the first closes, the second closes."""
        first_may_close, second_may_close = asyncio.Event(), asyncio.Event()

        @rlscope_ray.range("agent_decorated")
        async def one(i):
            if i == 0:
                await first_may_close.wait()
            else:
                first_may_close.set()
                await second_may_close.wait()
            return i

        t0 = asyncio.ensure_future(one(0))
        await asyncio.sleep(0)  # t0 opens its range and waits
        t1 = asyncio.ensure_future(one(1))
        await t0
        second_may_close.set()
        return await t0 + await t1


def _opened(kind: str, name: str):
    """The range a coroutine holds: rlscope_ray.range (entered in the
    coroutine's own frame by its `with`), or the `nvtx` package's start/end."""
    return rlscope_ray.range(name) if kind == "rlscope" else _NvtxStartEnd(name)


class _NvtxStartEnd:
    def __init__(self, name: str):
        self.name, self.rid = name, None

    def __enter__(self):
        import nvtx

        self.rid = nvtx.start_range(message=self.name)
        return self

    def __exit__(self, *exc):
        import nvtx

        nvtx.end_range(self.rid)
        return False


learner = Learner.options(runtime_env={"rlscope": {"rank": 1}}).remote()
agents = Agents.remote()
children = {}
orders = {}
for step in (1, 2, 3):
    with rlscope_ray.step(step):
        children[step] = ray.get(learner.work.remote())
        orders[step] = [ray.get(agents.interleave.remote(k)) for k in ("rlscope", "nvtx")]
        ray.get(agents.decorated.remote())
out_dir = rlscope_ray.shutdown()
with open(report, "w") as f:
    json.dump({"children": children, "orders": orders, "out": out_dir}, f)
