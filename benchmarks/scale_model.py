"""What each rank of a large synchronous training run reports: the traffic and data model shared
by the scale benchmark's simulated ranks (``scale_load.py``) and the store generator
(``scale_store.py``).

The run is task 1a (ResNet-20, CIFAR-10) on one GPU per rank with synchronous all-reduce: every
step waits for the slowest rank, so a straggler (a few ranks whose GPU throttles) shows the
highest compute time and the lowest communication share, while the other ranks wait for it in
``agg``. Every value is a pure function of (seed, rank, window), so a store built twice is the
same store and a test can name the stragglers in advance.

Items are the JSON objects the worker reporter sends (``workers/mlbench_worker/reporting/reporter.py``):
metrics ``{name, value, step, epoch, t}`` (telemetry samples carry no step), log lines
``{text, stream, seq, t}``, events ``{kind, payload, t}``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlbench_worker import sysmetrics as sm
from mlbench_worker import wire

SPEC_TEXT = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: scale-{ranks}
  labels:
    purpose: scale
  description: ResNet-20 on CIFAR-10 across {ranks} GPUs (a simulated run).
spec:
  task: 1a
  goal: full
  max_time: 3h
  workers: {ranks}
  backend: nccl
  hardware:
    gpu: 1xH100
    precision: fp32
  target:
    kind: kubernetes
    namespace: mlbench
    image: mlbench-worker:dev
  data:
    source: synthetic
"""
"""The spec of the simulated run (``SPEC_TEXT.format(ranks=N)``): a real spec the planner accepts."""

PHASE_SHARE = {"fwd_pass": 0.30, "comp_loss": 0.03, "backprop": 0.57, "opt_step": 0.10}
"""How a rank's compute time splits into the tracker's compute phases."""

GIB = 2**30
MIB = 2**20


@dataclass(frozen=True)
class RankProfile:
    """One rank's hardware and per-step timing (seconds)."""

    rank: int
    host: str
    slowdown: float  # 1.0, or the straggler's factor
    compute_s: float  # fwd_pass + comp_loss + backprop + opt_step
    load_s: float  # batch_load
    comm_s: float  # agg: the all-reduce plus the wait for the slowest rank
    metrics_s: float  # comp_metrics

    @property
    def straggler(self) -> bool:
        return self.slowdown > 1.0


@dataclass(frozen=True)
class Telemetry:
    """One hardware series under the ``sys/`` prefix (``mlbench_worker.sysmetrics``) and how it evolves.

    ``sample(profile, seconds, noise)`` gives the value ``seconds`` into the run; ``noise`` is a
    deterministic number in [-1, 1].
    """

    name: str
    sample: Callable[[RankProfile, float, float], float]


def _throttled(p: RankProfile, normal: float, throttled: float) -> float:
    return throttled if p.straggler else normal


TELEMETRY: tuple[Telemetry, ...] = (
    Telemetry(sm.CPU_PERCENT, lambda p, s, n: 102.0 + 6.0 * n),
    Telemetry(sm.RSS_MIB, lambda p, s, n: (6.2 * GIB + 1e4 * s + 5e6 * n) / MIB),
    Telemetry(sm.HOST_MEM_AVAILABLE_MIB, lambda p, s, n: (1400 * GIB - 8 * 6.2 * GIB + 1e8 * n) / MIB),
    Telemetry(sm.GPU_UTIL, lambda p, s, n: _throttled(p, 86.0, 99.0) + 2.0 * n),
    Telemetry(sm.GPU_MEM_USED_MIB, lambda p, s, n: (61.5 * GIB + 2e7 * n) / MIB),
    Telemetry(sm.GPU_MEM_PEAK_MIB, lambda p, s, n: 54.0 * GIB / MIB),
    Telemetry(sm.GPU_POWER_W, lambda p, s, n: _throttled(p, 640.0, 455.0) + 25.0 * n),
    Telemetry(sm.GPU_ENERGY_J, lambda p, s, n: _throttled(p, 640.0, 455.0) * s),
    Telemetry(sm.GPU_SM_CLOCK_MHZ, lambda p, s, n: _throttled(p, 1980.0, 1395.0) + 15.0 * n),
    Telemetry(sm.GPU_TEMP_C, lambda p, s, n: _throttled(p, 64.0, 88.0) + 1.5 * n),
    Telemetry(sm.NET_SENT_MIB_S, lambda p, s, n: 2.9e7 / MIB),
    Telemetry(sm.NET_RECV_MIB_S, lambda p, s, n: 2.9e7 / MIB),
)
"""The telemetry series every rank samples once per reporter interval, named and scaled as the
worker's sampler reports them (``mlbench_worker.sysmetrics``; the once-per-run limits left out)."""


def noise(rank: int, k: int, salt: int) -> float:
    """A deterministic, well-mixed number in [-1, 1] (splitmix64 of the three integers)."""
    x = (rank * 0x9E3779B97F4A7C15 + k * 0xBF58476D1CE4E5B9 + salt * 0x94D049BB133111EB) & (2**64 - 1)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    x ^= x >> 31
    return x / 2**63 - 1.0


class RunModel:
    """The simulated run: per-rank profiles and the items each rank reports.

    A *window* is what the worker reports every ``steps_per_window`` training steps (its
    ``report_every_steps``): window ``k`` ends at step ``k * steps_per_window``; an epoch is
    ``windows_per_epoch`` windows, followed by validation.
    """

    VAL_S = 6.0  # validation seconds per epoch
    GOAL = 80.0  # val_global_Prec@1 of task 1a's full goal

    def __init__(
        self,
        ranks: int,
        *,
        seed: int = 0,
        steps_per_window: int = 10,
        windows_per_epoch: int = 20,
        goal_epoch: int = 5,
        slowed: dict[int, float] | None = None,
    ) -> None:
        self.ranks = ranks
        self.seed = seed
        self.steps_per_window = steps_per_window
        self.windows_per_epoch = windows_per_epoch
        self.goal_epoch = goal_epoch
        if slowed is not None:  # these ranks' compute slowed by these factors (a fault on purpose)
            self.slowdowns = dict(slowed)
        else:  # a few throttling GPUs, chosen from the seed
            rng = random.Random(seed)
            count = max(1, ranks // 256)
            chosen = rng.sample(range(ranks), count) if ranks > 1 else [0]
            self.slowdowns = {r: 1.4 + 0.15 * i for i, r in enumerate(chosen)}
        chosen = list(self.slowdowns)
        self.stragglers = tuple(sorted(chosen, key=lambda r: -self.slowdowns[r]))
        """Straggler ranks, slowest first."""
        base = [self._busy(r) for r in range(ranks)]
        self.allreduce_s = 0.020
        self.step_s = max(base) + self.allreduce_s + 0.001
        """Wall seconds of one synchronous step: the slowest rank's work plus the all-reduce."""
        self.window_s = self.step_s * steps_per_window

    def _busy(self, rank: int) -> float:
        return self._compute(rank) + self._load(rank)

    def _compute(self, rank: int) -> float:
        return 0.060 * (1.0 + 0.02 * noise(rank, 0, 1 + self.seed)) * self.slowdowns.get(rank, 1.0)

    def _load(self, rank: int) -> float:
        return 0.004 * (1.0 + 0.2 * noise(rank, 0, 2 + self.seed))

    def profile(self, rank: int) -> RankProfile:
        compute, load = self._compute(rank), self._load(rank)
        return RankProfile(
            rank=rank,
            host=f"gpu-node-{rank // 8:04d}",
            slowdown=self.slowdowns.get(rank, 1.0),
            compute_s=compute,
            load_s=load,
            comm_s=self.step_s - 0.001 - compute - load,
            metrics_s=0.001,
        )

    # ------------------------------------------------------------------------- metrics

    def epoch_of(self, window: int) -> int:
        """The (1-based) epoch that window ``window`` (1-based) belongs to."""
        return (window - 1) // self.windows_per_epoch + 1

    def train_metrics(self, p: RankProfile, window: int, t: float) -> list[dict[str, Any]]:
        """``train_loss``, ``train_Prec@1``, ``lr``, ``step_time`` of one report window."""
        step = window * self.steps_per_window
        epoch = step / (self.steps_per_window * self.windows_per_epoch)
        progress = epoch / max(1, self.goal_epoch)
        loss = 0.25 + 2.05 * math.exp(-3.0 * progress) + 0.04 * noise(p.rank, window, 3)
        prec = max(0.0, min(100.0, 100.0 * (1.0 - loss / 2.4) + 1.5 * noise(p.rank, window, 4)))
        lr = 0.02 * self.ranks * min(1.0, epoch / max(1.0, math.log2(max(2, self.ranks))))
        step_time = self.step_s * (1.0 + 0.004 * noise(p.rank, window, 5))
        return [
            {"name": wire.TRAIN_LOSS, "value": loss, "step": step, "epoch": epoch, "t": t},
            {"name": wire.TRAIN_PREC1, "value": prec, "step": step, "epoch": epoch, "t": t},
            {"name": wire.LR, "value": lr, "step": step, "epoch": epoch, "t": t},
            {"name": wire.STEP_TIME, "value": step_time, "step": step, "epoch": epoch, "t": t},
        ]

    def totals(self, p: RankProfile, window: int, t: float) -> list[dict[str, Any]]:
        """The tracker's cumulative ``time_*`` and ``phase_*`` seconds after ``window`` windows."""
        steps = window * self.steps_per_window
        epoch = steps / (self.steps_per_window * self.windows_per_epoch)
        compute = p.compute_s * steps
        values = {
            wire.TIME_COMPUTE: compute,
            wire.TIME_COMMUNICATION: p.comm_s * steps,
            wire.TIME_PREPROCESS: p.load_s * steps,
            wire.TIME_METRICS: p.metrics_s * steps,
            wire.TIME_TRAIN: self.step_s * steps,
            wire.TIME_VALIDATION: self.VAL_S * math.floor(epoch),
            wire.phase_metric("batch_load"): p.load_s * steps,
        }
        values.update({wire.phase_metric(name): compute * share for name, share in PHASE_SHARE.items()})
        values[wire.phase_metric("agg")] = p.comm_s * steps
        values[wire.phase_metric("comp_metrics")] = p.metrics_s * steps
        return [{"name": n, "value": v, "step": steps, "epoch": epoch, "t": t} for n, v in values.items()]

    def telemetry(self, p: RankProfile, sample: int, seconds: float, t: float) -> list[dict[str, Any]]:
        """One sample of every ``TELEMETRY`` series, ``seconds`` into the run."""
        return [
            {"name": s.name, "value": s.sample(p, seconds, noise(p.rank, sample, 10 + i)), "t": t}
            for i, s in enumerate(TELEMETRY)
        ]

    def val_accuracy(self, epoch: int) -> float:
        """``val_global_Prec@1`` after ``epoch``: crosses the goal at ``goal_epoch``."""
        reach = 1.0 - math.exp(-epoch / max(1, self.goal_epoch) * 2.2)
        top = self.GOAL / (1.0 - math.exp(-2.2)) + 0.05
        return top * reach

    def validation(self, p: RankProfile, epoch: int, t: float) -> list[dict[str, Any]]:
        """The all-reduced validation metrics: rank 0 reports them (as the worker does)."""
        if p.rank != 0:
            return []
        step = epoch * self.windows_per_epoch * self.steps_per_window
        accuracy = self.val_accuracy(epoch)
        loss = 0.3 + 1.9 * math.exp(-3.0 * epoch / max(1, self.goal_epoch))
        return [
            {"name": wire.VAL_GLOBAL_PREC1, "value": accuracy, "step": step, "epoch": float(epoch), "t": t},
            {"name": wire.VAL_GLOBAL_LOSS, "value": loss, "step": step, "epoch": float(epoch), "t": t},
        ]

    # ---------------------------------------------------------------------- logs, events

    def start_logs(self, p: RankProfile) -> list[str]:
        lines = [
            f"[rank {p.rank}] preparing CIFAR-10 (synthetic) in /data on {p.host}",
            f"{p.host}:{p.rank}:{p.rank} NCCL INFO Channel 00/32 : {p.rank} -> {(p.rank + 1) % self.ranks}",
        ]
        if p.rank == 0:
            lines.append(
                f"[rank 0] training 1a on {self.ranks} rank(s), backend nccl, device cuda:0, "
                f"max 164 epochs, goal val_global_Prec@1 >= {self.GOAL:g}"
            )
        return lines

    def window_logs(self, p: RankProfile, window: int) -> list[tuple[str, str]]:
        """(stream, text) lines a rank prints during a window: stragglers warn about their clocks
        every few windows, every rank prints a throughput line every tenth window."""
        lines: list[tuple[str, str]] = []
        if p.straggler and window % 5 == 0:
            lines.append(
                ("stderr", f"[rank {p.rank}] warning: GPU 0 clocks throttled (thermal, 88 C), sm 1395 MHz")
            )
        if (window + p.rank) % 10 == 0:
            rate = 128 / self.step_s
            lines.append(
                ("stdout", f"[rank {p.rank}] step {window * self.steps_per_window}: {rate:.0f} img/s")
            )
        return lines

    def epoch_log(self, p: RankProfile, epoch: int) -> str:
        return (
            f"[rank {p.rank}] epoch {epoch}: val_global_Prec@1={self.val_accuracy(epoch):.4g}, "
            f"train {self.step_s * self.steps_per_window * self.windows_per_epoch * epoch:.1f}s, "
            f"validation {self.VAL_S * epoch:.1f}s"
        )

    def end_log(self, p: RankProfile, reached: bool) -> str:
        how = "success (goal reached)" if reached else "aborted (stopped before the goal)"
        return f"[rank {p.rank}] run stopped: {how}"

    def start_events(self, p: RankProfile, t: float) -> list[dict[str, Any]]:
        """Every rank's environment fingerprint (the worker sends rank 0's; a run this size needs
        each host's, and it is the heavier case); rank 0 also starts setup, the run, epoch 1."""
        env = {
            "worker_version": "0.1.0",
            "python": "3.11.9",
            "torch": "2.5.1+cu124",
            "backend": "nccl",
            "backend_version": "2.21.5",
            "launcher": "kubernetes-indexed-job",
            "world_size": self.ranks,
            "hostname": p.host,
            "device": "cuda:0",
            "gpu_model": "NVIDIA H100 80GB HBM3",
            "gpu_memory_gib": 79.1,
            "cuda": "12.4",
            "precision": "fp32",
        }
        events = [_event(wire.Environment(facts=env), t)]
        if p.rank == 0:
            facts = wire.RunStart(train_samples=50_000, eval_samples=10_000, comm_precision="fp32")
            events.insert(0, _event(wire.InitStart(), t))
            events.append(_event(facts, t))
            events.append(_event(wire.EpochStart(epoch=1), t))
        return events

    def epoch_events(self, p: RankProfile, epoch: int, t: float, *, last: bool) -> list[dict[str, Any]]:
        """Rank 0's validation of ``epoch`` (``eval_start`` .. ``epoch_end``, ``VAL_S`` apart, the
        end at ``t``) and the next epoch's start unless it is the ``last``."""
        if p.rank != 0:
            return []
        train_s = self.step_s * self.steps_per_window * self.windows_per_epoch * epoch
        end = wire.EpochEnd(epoch=epoch, train_time_s=train_s, val_time_s=self.VAL_S * epoch)
        events = [_event(wire.EvalStart(epoch=epoch), t - self.VAL_S), _event(end, t)]
        if not last:
            events.append(_event(wire.EpochStart(epoch=epoch + 1), t))
        return events

    def end_events(self, p: RankProfile, epoch: int, t: float) -> list[dict[str, Any]]:
        """Rank 0's goal and stop events after ``epoch`` epochs."""
        if p.rank != 0:
            return []
        train_s = self.step_s * self.steps_per_window * self.windows_per_epoch * epoch
        details = vars(
            wire.Progress(
                epoch=epoch,
                step=epoch * self.windows_per_epoch * self.steps_per_window,
                train_time_s=train_s,
                val_time_s=self.VAL_S * epoch,
            )
        )
        accuracy = self.val_accuracy(epoch)
        if accuracy < self.GOAL:
            reason = f"max_time_s passed before the goal ({accuracy:.4g} < {self.GOAL:g})"
            return [_event(wire.RunStop(status="aborted", reason=reason, exit_code=0, **details), t)]
        metric = wire.VAL_GLOBAL_PREC1
        reached = wire.GoalReached(metric=metric, value=accuracy, target=self.GOAL, **details)
        reason = f"goal reached: {metric}={accuracy:.4g} (target {self.GOAL:g})"
        return [
            _event(reached, t),
            _event(wire.RunStop(status="success", reason=reason, exit_code=0, **details), t),
        ]


def _event(payload: wire.Payload, t: float) -> dict[str, Any]:
    """One event as a rank's reporter posts it."""
    return {"kind": payload.KIND, "payload": payload.to_payload(), "t": t}
