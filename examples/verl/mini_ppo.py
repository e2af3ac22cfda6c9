"""`make demo`: a PPO job shaped like verl's RayPPOTrainer.fit, under rlscope-ray.

A local two-node Ray cluster (ray.cluster_utils.Cluster, one CPU per node, both
nodes started with the "rlscope" runtime_env plugin) runs one colocated worker
group, like verl's fused ActorRolloutRefWorker + critic + reward model: four
`PPOWorker` actors, ranks 0..3, two per node (rank r on node r % 2, so the
default profiled ranks 0 and 1 sit on different nodes). Each hosts a tiny policy (MLP),
a frozen reference copy, a critic and a reward model, and does small real
numeric work (pure Python: no numpy needed) with NVTX ranges inside
("forward", "backward", "optimizer_step").

This script is the single controller. Each training step is
`with rlscope_ray.step(n):`, and each of verl's sub-tasks is
`with nvtx.annotate(name):` (what verl's marked_timer emits): gen, reward,
old_log_prob, ref, values, adv (GAE on the driver), update_critic,
update_actor; each one dispatches to all four ranks and waits (ray.get).

By default steps 2, 3 and 5 of six are written, for ranks 0 and 1 (and the
controller): <out>/step_<N>/trace.json (open in ui.perfetto.dev) and
summary.json, plus <out>/run.json.

    python examples/verl/mini_ppo.py --out demo_out [--steps 6] [--capture 2,3,5] [--ranks 0,1]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import zlib
import shutil
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import nvtx  # verl's marked_timer and the workers' ranges: the NVTX API, nothing rlscope-specific
import ray

PLUGIN_SPEC = [{"class": "rlscope_ray.ray_plugin.RLScopePlugin", "priority": 50}]
WORLD_SIZE = 4
NODES = 2

# verl's marked_timer names, and the worker method each one dispatches to.
SUBTASKS: List[Tuple[str, Optional[str]]] = [
    ("gen", "generate_sequences"),
    ("reward", "compute_rm_score"),
    ("old_log_prob", "compute_log_prob"),
    ("ref", "compute_ref_log_prob"),
    ("values", "compute_values"),
    ("adv", None),  # on the driver
    ("update_critic", "update_critic"),
    ("update_actor", "update_actor"),
]

# Toy problem sizes (per rank): BATCH prompts, each answered with RESP_LEN tokens.
OBS_DIM, HIDDEN, VOCAB = 8, 16, 6
BATCH, RESP_LEN = 8, 8
GAMMA, LAM, KL_COEF, CLIP, LR_ACTOR, LR_CRITIC, PPO_EPOCHS = 1.0, 0.95, 0.05, 0.2, 0.05, 0.05, 2


# ----------------------------------------------------------- tiny numerics


class MLP:
    """x -> tanh(W1 x + b1) -> W2 h + b2, with a hand-written backward pass."""

    def __init__(self, n_in: int, n_hidden: int, n_out: int, rng: random.Random) -> None:
        s1, s2 = 1 / math.sqrt(n_in), 1 / math.sqrt(n_hidden)
        self.w1 = [[rng.gauss(0, s1) for _ in range(n_in)] for _ in range(n_hidden)]
        self.b1 = [0.0] * n_hidden
        self.w2 = [[rng.gauss(0, s2) for _ in range(n_hidden)] for _ in range(n_out)]
        self.b2 = [0.0] * n_out

    def copy(self) -> "MLP":
        m = MLP.__new__(MLP)
        m.w1, m.b1 = [r[:] for r in self.w1], self.b1[:]
        m.w2, m.b2 = [r[:] for r in self.w2], self.b2[:]
        return m

    def forward(self, x: Sequence[float]) -> Tuple[List[float], List[float]]:
        h = [math.tanh(sum(w * xi for w, xi in zip(row, x)) + b) for row, b in zip(self.w1, self.b1)]
        out = [sum(w * hi for w, hi in zip(row, h)) + b for row, b in zip(self.w2, self.b2)]
        return h, out

    def zero_grads(self) -> Dict[str, list]:
        return {"w1": [[0.0] * len(r) for r in self.w1], "b1": [0.0] * len(self.b1),
                "w2": [[0.0] * len(r) for r in self.w2], "b2": [0.0] * len(self.b2)}

    def backward(self, g: Dict[str, list], x: Sequence[float], h: Sequence[float], dout: Sequence[float]) -> None:
        dh = [0.0] * len(h)
        for j, d in enumerate(dout):
            if d == 0.0:
                continue
            g["b2"][j] += d
            row, grow = self.w2[j], g["w2"][j]
            for k, hk in enumerate(h):
                grow[k] += d * hk
                dh[k] += d * row[k]
        for k, hk in enumerate(h):
            dz = dh[k] * (1 - hk * hk)
            g["b1"][k] += dz
            grow = g["w1"][k]
            for i, xi in enumerate(x):
                grow[i] += dz * xi

    def sgd(self, g: Dict[str, list], lr: float, n: int) -> None:
        s = lr / max(n, 1)
        for w, gw in ((self.w1, g["w1"]), (self.w2, g["w2"])):
            for row, grow in zip(w, gw):
                for i, gi in enumerate(grow):
                    row[i] -= s * gi
        for b, gb in ((self.b1, g["b1"]), (self.b2, g["b2"])):
            for i, gi in enumerate(gb):
                b[i] -= s * gi


def log_softmax(z: Sequence[float]) -> List[float]:
    m = max(z)
    lse = m + math.log(sum(math.exp(v - m) for v in z))
    return [v - lse for v in z]


def next_obs(obs: Sequence[float], token: int) -> List[float]:
    """The 'language': the next observation is a fixed function of the last token."""
    return [0.7 * o + (0.5 if i == token % OBS_DIM else 0.0) - 0.05 * token for i, o in enumerate(obs)]


def gae(rewards: Sequence[float], values: Sequence[float]) -> Tuple[List[float], List[float]]:
    """verl's compute_gae_advantage_return for one response (no padding)."""
    adv, last = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        nv = values[t + 1] if t + 1 < len(rewards) else 0.0
        delta = rewards[t] + GAMMA * nv - values[t]
        last = delta + GAMMA * LAM * last
        adv[t] = last
    return adv, [a + v for a, v in zip(adv, values)]


# ----------------------------------------------------------- the worker group


@ray.remote(num_cpus=0)
class PPOWorker:
    """One rank of a fused worker group: actor/rollout, reference, critic, reward model."""

    def __init__(self, rank: int, seed: int = 0, extra_native_work: int = 0) -> None:
        self.rank = rank
        # --slow-rank: this many KiB of incompressible bytes compressed (zlib, native code) in each
        # update_actor: a known cause.
        self.extra_native_work = random.Random(rank).randbytes(1024 * extra_native_work)
        rng = random.Random(seed)  # same init on every rank, as after a broadcast
        self.actor = MLP(OBS_DIM, HIDDEN, VOCAB, rng)
        self.ref = self.actor.copy()
        self.critic = MLP(OBS_DIM, HIDDEN, 1, rng)
        self.rm = MLP(OBS_DIM, HIDDEN, VOCAB, rng)  # reward model: scores the token chosen in each state
        self.rng = random.Random(seed * 1000 + rank)
        self.batch: Dict[str, list] = {}

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def generate_sequences(self, step: int) -> int:
        obs_all, tokens = [], []
        for _ in range(BATCH):
            obs = [self.rng.uniform(-1, 1) for _ in range(OBS_DIM)]  # the prompt
            seq_obs, seq_tok = [], []
            for _ in range(RESP_LEN):
                with nvtx.annotate("forward"):
                    _, logits = self.actor.forward(obs)
                probs = [math.exp(v) for v in log_softmax(logits)]
                tok = self.rng.choices(range(VOCAB), weights=probs)[0]
                seq_obs.append(obs)
                seq_tok.append(tok)
                obs = next_obs(obs, tok)
            obs_all.append(seq_obs)
            tokens.append(seq_tok)
        self.batch = {"obs": obs_all, "tokens": tokens}
        return BATCH * RESP_LEN

    def compute_rm_score(self) -> List[float]:
        """Sequence-level score of each response (placed on its last token by the driver)."""
        scores = []
        with nvtx.annotate("forward"):
            for seq_obs, seq_tok in zip(self.batch["obs"], self.batch["tokens"]):
                s = sum(self.rm.forward(o)[1][t] for o, t in zip(seq_obs, seq_tok)) / RESP_LEN
                scores.append(math.tanh(s))
        return scores

    def _log_probs(self, model: MLP) -> List[List[float]]:
        out = []
        with nvtx.annotate("forward"):
            for seq_obs, seq_tok in zip(self.batch["obs"], self.batch["tokens"]):
                out.append([log_softmax(model.forward(o)[1])[t] for o, t in zip(seq_obs, seq_tok)])
        return out

    def compute_log_prob(self) -> float:
        self.batch["old_log_prob"] = self._log_probs(self.actor)
        n = BATCH * RESP_LEN
        return -sum(map(sum, self.batch["old_log_prob"])) / n  # entropy-ish, for logging

    def compute_ref_log_prob(self) -> List[List[float]]:
        """Per-token KL(old || ref) estimate (k1), for the driver's KL penalty."""
        ref = self._log_probs(self.ref)
        return [[o - r for o, r in zip(so, sr)] for so, sr in zip(self.batch["old_log_prob"], ref)]

    def compute_values(self) -> List[List[float]]:
        with nvtx.annotate("forward"):
            return [[self.critic.forward(o)[1][0] for o in seq_obs] for seq_obs in self.batch["obs"]]

    def update_critic(self, returns: List[List[float]]) -> float:
        loss = 0.0
        for _ in range(PPO_EPOCHS):
            g, loss, n = self.critic.zero_grads(), 0.0, 0
            with nvtx.annotate("backward"):
                for seq_obs, seq_ret in zip(self.batch["obs"], returns):
                    for o, ret in zip(seq_obs, seq_ret):
                        h, (v,) = self.critic.forward(o)
                        loss += 0.5 * (v - ret) ** 2
                        self.critic.backward(g, o, h, [v - ret])
                        n += 1
            with nvtx.annotate("optimizer_step"):
                self.critic.sgd(g, LR_CRITIC, n)
        return loss / max(n, 1)

    def update_actor(self, advantages: List[List[float]]) -> float:
        loss = 0.0
        for _ in range(PPO_EPOCHS):
            g, loss, n = self.actor.zero_grads(), 0.0, 0
            with nvtx.annotate("backward"):
                for seq_obs, seq_tok, seq_old, seq_adv in zip(self.batch["obs"], self.batch["tokens"],
                                                               self.batch["old_log_prob"], advantages):
                    for o, t, old, a in zip(seq_obs, seq_tok, seq_old, seq_adv):
                        h, logits = self.actor.forward(o)
                        lp = log_softmax(logits)
                        ratio = math.exp(lp[t] - old)
                        clipped = min(max(ratio, 1 - CLIP), 1 + CLIP)
                        loss += -min(ratio * a, clipped * a)
                        # d(-ratio*a)/dlogits when the unclipped term is the active one, else 0
                        active = ratio * a <= clipped * a
                        coef = -ratio * a if active else 0.0
                        dlogits = [coef * ((1.0 if k == t else 0.0) - math.exp(lp[k])) for k in range(VOCAB)]
                        self.actor.backward(g, o, h, dlogits)
                        n += 1
            with nvtx.annotate("optimizer_step"):
                self.actor.sgd(g, LR_ACTOR, n)
        if self.extra_native_work:
            with nvtx.annotate("extra_native_work"):
                zlib.compress(self.extra_native_work, 9)
        return loss / max(n, 1)



# ----------------------------------------------------------- the controller


def compute_advantages(scores: List[List[float]], kls: List[List[List[float]]],
                       values: List[List[List[float]]]) -> Tuple[list, list, float]:
    """Per rank: token rewards = score on the last token - KL penalty; GAE; whitened advantages."""
    advs, rets = [], []
    for r_scores, r_kl, r_vals in zip(scores, kls, values):
        r_adv, r_ret = [], []
        for score, kl, vals in zip(r_scores, r_kl, r_vals):
            rewards = [-KL_COEF * k for k in kl]
            rewards[-1] += score
            a, ret = gae(rewards, vals)
            r_adv.append(a)
            r_ret.append(ret)
        advs.append(r_adv)
        rets.append(r_ret)
    flat = [a for r in advs for seq in r for a in seq]
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((a - mean) ** 2 for a in flat) / len(flat)) + 1e-8
    advs = [[[(a - mean) / std for a in seq] for seq in r] for r in advs]
    mean_score = sum(s for r in scores for s in r) / sum(len(r) for r in scores)
    return advs, rets, mean_score


def parse_ints(text: str):
    """'2,3,5' -> [2, 3, 5]; 'all' -> 'all' (the config's own spelling)."""
    text = text.replace(" ", "")
    return "all" if text == "all" else [int(x) for x in text.split(",") if x]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="demo_out", help="output directory (default demo_out)")
    ap.add_argument("--steps", type=int, default=6, help="training steps to run (default 6)")
    ap.add_argument("--capture", default="2,3,5", help="steps to write: comma-separated or all (default 2,3,5)")
    ap.add_argument("--ranks", default="0,1", help="ranks to profile: comma-separated or all (default 0,1)")
    ap.add_argument("--subtasks", default="", help="only these sub-tasks, comma-separated (e.g. gen,update_actor)")
    ap.add_argument("--discrete", action="store_true",
                    help="one capture per sub-task occurrence: <out>/step_<N>/<subtask>/trace.json")
    ap.add_argument("--slow-rank", type=int, default=-1,
                    help="this rank's update_actor also compresses --slow-kib KiB of random bytes (a known cause for "
                         "rlscope-ray diff)")
    ap.add_argument("--slow-kib", type=int, default=128)
    ap.add_argument("--profile", choices=("on", "off", "none"), default="on",
                    help="off: the same job with runtime_env {'rlscope': {'enabled': False}} on every worker")
    ap.add_argument("--nodes", type=int, default=NODES, help=f"Ray nodes on this machine (default {NODES})")
    ap.add_argument("--relays", choices=("auto", "on", "off"), default="auto",
                    help="rlscope_ray.init(relays=...): auto (default) relays only across hosts; on: one per host "
                         "even here")
    ap.add_argument("--always-on", action="store_true",
                    help="always_on: every step's figures in <out>/figures.jsonl and the run database; --capture "
                         "steps, and steps that go wrong, written in full")
    ap.add_argument("--timings", help="write wall/setup/loop seconds as JSON to this file (benchmarks)")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    t_start = time.monotonic()
    # Steps of an earlier run in the same directory would read as this run's.
    for old in out.glob("step_*"):
        if old.is_dir() and old.name[5:].isdigit():
            shutil.rmtree(old)

    # Every node process of the Cluster inherits os.environ: register the plugin first.
    os.environ["RAY_RUNTIME_ENV_PLUGINS"] = json.dumps(PLUGIN_SPEC)
    from ray.cluster_utils import Cluster

    import rlscope_ray

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"node0": 4}, "include_dashboard": False})
    for n in range(1, args.nodes):
        cluster.add_node(num_cpus=1, resources={f"node{n}": 4})
    cluster.wait_for_nodes()
    try:
        config = {"steps": parse_ints(args.capture), "ranks": parse_ints(args.ranks),
                  "flush": {"step_grace_ms": 3000}, "discrete": args.discrete}
        if args.subtasks:
            config["subtasks"] = args.subtasks.split(",")
        if args.always_on:
            config["always_on"] = {"enabled": True}
        if args.profile == "none":  # no profiler at all: the baseline of the bench's overhead rows
            ray.init(address=cluster.address, logging_level="warning", log_to_driver=True)
        else:
            rlscope_ray.init(config=config, address=cluster.address, output_dir=str(out), relays=args.relays,
                             logging_level="warning", log_to_driver=True)
        rlscope_value = (lambda r: {"rank": r}) if args.profile == "on" else (lambda r: {"enabled": False})
        workers = [PPOWorker.options(runtime_env={"rlscope": rlscope_value(r)} if args.profile != "none" else {},
                                     resources={f"node{r % args.nodes}": 0.01}).remote(
                                         r, 0, args.slow_kib if r == args.slow_rank else 0)
                   for r in range(WORLD_SIZE)]
        nodes = ray.get([w.node_id.remote() for w in workers])  # all four are up
        t_setup = time.monotonic() - t_start

        def dispatch(method: str, *per_rank_args) -> list:
            refs = [getattr(w, method).remote(*(a[r] for a in per_rank_args)) for r, w in enumerate(workers)]
            return ray.get(refs)

        t_loop = time.monotonic()
        steps_ms, steps_end = [], []
        for step in range(1, args.steps + 1):
            t0 = time.monotonic()
            with rlscope_ray.step(step):
                with nvtx.annotate("gen"):
                    dispatch("generate_sequences", [step] * WORLD_SIZE)
                with nvtx.annotate("reward"):
                    scores = dispatch("compute_rm_score")
                with nvtx.annotate("old_log_prob"):
                    dispatch("compute_log_prob")
                with nvtx.annotate("ref"):
                    kls = dispatch("compute_ref_log_prob")
                with nvtx.annotate("values"):
                    values = dispatch("compute_values")
                with nvtx.annotate("adv"):
                    advs, rets, mean_score = compute_advantages(scores, kls, values)
                with nvtx.annotate("update_critic"):
                    vf_loss = sum(dispatch("update_critic", rets)) / WORLD_SIZE
                with nvtx.annotate("update_actor"):
                    pg_loss = sum(dispatch("update_actor", advs)) / WORLD_SIZE
            steps_end.append(time.monotonic())
            steps_ms.append((steps_end[-1] - t0) * 1000)
            print(f"step {step}: score {mean_score:+.3f}  vf_loss {vf_loss:.4f}  pg_loss {pg_loss:+.4f}  "
                  f"({steps_ms[-1]:.0f} ms)", flush=True)
        t_loop = time.monotonic() - t_loop
    finally:
        out_dir = rlscope_ray.shutdown()  # the run directory is complete when this returns
        ray.shutdown()
        cluster.shutdown()

    if args.profile != "none":
        print(f"\nrlscope-ray demo: {args.steps} PPO steps on {WORLD_SIZE} workers over {len(set(nodes))} nodes; "
              f"profiles in {out_dir or out}")
        print_summary(out)
    wall = time.monotonic() - t_start
    print(f"\nwall time {wall:.1f} s (cluster + workers up {t_setup:.1f} s, training loop {t_loop:.1f} s)")
    if args.timings:
        with open(args.timings, "w") as f:
            json.dump({"wall_s": wall, "setup_s": t_setup, "loop_s": t_loop, "steps": args.steps,
                       "steps_ms": steps_ms, "steps_end_monotonic": steps_end}, f)
    return 0


def print_summary(out: Path) -> None:
    run = json.loads((out / "run.json").read_text())
    print(f"  processes: {len(run['processes'])}, steps written: {run['steps_written']}, "
          f"not profiled: {len(run.get('not_profiled') or [])}")
    cols = [(name, method) for name, method in SUBTASKS]
    for n in run["steps_written"]:
        summary = json.loads((out / f"step_{n}" / "summary.json").read_text())
        if "captures" in summary:  # discrete mode: one trace per sub-task occurrence
            print(f"\nstep {n}: {summary['duration_ms']:.1f} ms, {len(summary['captures'])} captures:")
            for c in summary["captures"]:
                cap = json.loads((out / f"step_{n}" / c / "summary.json").read_text())
                print(f"  {c:16s} {(cap['end_ns'] - cap['begin_ns']) / 1e6:8.2f} ms  {cap['totals']['spans']:4d} spans"
                      f"  {out / f'step_{n}' / c / 'trace.json'}")
            continue
        trace = json.loads((out / f"step_{n}" / "trace.json").read_text())
        events = trace["traceEvents"]
        names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
        print(f"\nstep {n}: {summary['duration_ms']:.1f} ms, {summary['totals']['processes']} processes, "
              f"{summary['totals']['spans']} spans, {summary['totals']['dropped']} dropped, "
              f"late: {summary['late_processes'] or 'none'}, not profiled: {summary.get('not_profiled') or 'none'}")
        print("  ms per sub-task (controller: its range; workers: the method it dispatched)")
        print("    " + " ".join(f"{name[:9]:>9s}" for name, _ in cols))
        # The controller first, then the workers by rank.
        procs = sorted(summary["processes"], key=lambda p: (p["role"] != "controller", p.get("rank") or 0))
        for proc in procs:
            label = proc["label"]
            pids = [pid for pid, name in names.items() if name == label]
            if not pids or proc["spans"] == 0:
                print(f"  {label}\n    (no events in this step)")
                continue
            ms = []
            for name, method in cols:
                key = name if proc["role"] == "controller" else method
                if key is None:
                    ms.append("-")
                    continue
                total = sum(float(e["dur"]) for e in events
                            if e["ph"] == "X" and e["pid"] == pids[0] and e["name"] == key)
                ms.append(f"{total / 1000:.2f}")
            print(f"  {label}")
            print("    " + " ".join(f"{m:>9s}" for m in ms))
        print(f"  trace: {out / f'step_{n}' / 'trace.json'} (open in ui.perfetto.dev)")


if __name__ == "__main__":
    sys.exit(main())
