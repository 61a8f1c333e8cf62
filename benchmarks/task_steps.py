"""Training steps of tasks 2a and 3a on gloo ranks (2 by default): the worker runtime vs plain PyTorch loops.

Goal (issue 8): each task's step is at least as fast as a plain PyTorch implementation of the
same step (ratio plain time / our time >= 1.0). Ours is the real ``train_step`` of the task's
trainer (tracker stamps for every phase, CentralizedSGD with one flat all-reduce, the task's loss
and update rules). The peers are the textbook loops with ``DistributedDataParallel``:

- 2a: MLBench's formulation, bias-free linear model, BCE plus ``l2/2 * ||w||^2`` in the autograd
  graph, SGD. (Ours applies the same L2 gradient as fused weight decay.)
- 3a: the Salesforce AWD-LSTM recipe, embedding dropout by masking the whole embedding matrix,
  weight-dropped LSTMs, locked dropout, AR/TAR, clipping at 0.25, SGD with the LR scaled by the
  window length. (Ours masks only the looked-up embedding rows; same distribution.)

Both sides see the same batches (3a: fixed 70-token windows). Rounds alternate (ABBA); rank 0
prints median step times and the median of paired ratios.

    python benchmarks/task_steps.py [--task 2a|3a|both] [--rounds 6] [--steps 20] [--awd-batch 20]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workers"))


def _context(task: str, hp: dict[str, Any], data: dict[str, Any]) -> Any:
    import torch
    from mlbench_worker.comm import TorchComm
    from mlbench_worker.config import parse_config
    from mlbench_worker.context import RunContext
    from mlbench_worker.launch.detect import detect_rendezvous
    from mlbench_worker.reporting.reporter import Reporter

    comm = TorchComm("gloo")
    config = parse_config(
        {
            "run_id": "bench",
            "task": task,
            "backend": "gloo",
            "world_size": comm.world_size,
            "data": data,
            "hyperparameters": hp,
        }
    )
    return RunContext(
        config, detect_rendezvous(), comm, torch.device("cpu"), Reporter(None, "bench", "", comm.rank)
    )


def _alternate(
    sides: dict[str, Callable[[], None]], rounds: int, steps: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and process-CPU seconds per step, per side and round (rounds alternate ABBA)."""
    import torch.distributed as dist

    for fn in sides.values():  # warm-up: lazy imports, DDP buckets, allocator
        for _ in range(2):
            fn()
    names = list(sides)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            dist.barrier()
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                sides[name]()
            dist.barrier()
            wall[name].append((time.perf_counter() - start) / steps)
            cpu[name].append((time.process_time() - start_cpu) / steps)
    return wall, cpu


def _print(
    title: str, measured: tuple[dict[str, list[float]], dict[str, list[float]]], unit_ms: bool = True
) -> None:
    scale, unit = (1e3, "ms") if unit_ms else (1e6, "us")
    print(title)
    for label, times in zip(("wall", "cpu "), measured, strict=True):
        ours, plain = statistics.median(times["ours"]), statistics.median(times["plain"])
        paired = statistics.median(p / o for o, p in zip(times["ours"], times["plain"], strict=True))
        print(
            f"  {label}: ours {ours * scale:9.2f} {unit}/step, plain PyTorch (DDP) {plain * scale:9.2f} "
            f"{unit}/step, ratio plain/ours {paired:6.3f} (median of paired rounds; goal >= 1.0)"
        )
    print("  (cpu = this rank's process CPU time: robust to other load on the machine, excludes waiting)")


def bench_logreg(args: argparse.Namespace) -> None:
    import torch
    import torch.nn.functional as F
    from mlbench_worker.tasks.logreg import LogRegTrainer
    from mlbench_worker.timing.tracker import Tracker
    from torch.nn.parallel import DistributedDataParallel

    batch, l2, lr = 128, 2.5e-6, 4.0
    ctx = _context(
        "2a",
        {"batch_size": batch, "lr": lr * 2, "base_lr": lr, "l2": l2, "overlap_comm": args.overlap},
        {"source": "synthetic", "options": {"train_samples": 8192, "val_samples": 64}},
    )
    ours = LogRegTrainer(ctx)
    tracker = Tracker(ctx.device)
    tracker.train()
    peer_model = torch.nn.Linear(2000, 1, bias=False)
    torch.nn.init.zeros_(peer_model.weight)
    peer = DistributedDataParallel(peer_model)
    peer_opt = torch.optim.SGD(peer.parameters(), lr=lr * 2)

    def batches() -> Any:
        epoch = 0
        while True:
            epoch += 1
            yield from ours.train_loader.epoch(epoch)

    ours_iter = tracker.each_batch(ours._tensors(batches()))
    peer_iter = batches()
    step = [0]

    def our_step() -> None:
        item, record = next(ours_iter)
        ours.before_step(step[0])
        ours.train_step(item, record)
        step[0] += 1

    def plain_step() -> None:
        x, y = next(peer_iter)
        inputs, target = torch.from_numpy(x), torch.from_numpy(y).float()
        peer_opt.zero_grad()
        out = peer(inputs).squeeze(-1)
        loss = F.binary_cross_entropy_with_logits(out, target) + l2 / 2 * sum(
            p.norm(2) ** 2 for p in peer.parameters()
        )
        loss.backward()
        peer_opt.step()
        ((out > 0).float() == target).sum().item()  # the accuracy MLBench computed per batch
        float(loss.item())

    times = _alternate({"ours": our_step, "plain": plain_step}, args.rounds, args.steps)
    if ctx.rank == 0:
        _print(
            f"2a logistic regression step, batch {batch}/rank, 2000 features, {ctx.world_size} gloo rank(s)",
            times,
            unit_ms=False,
        )


def bench_awd(args: argparse.Namespace) -> None:
    import torch
    import torch.nn.functional as F
    from mlbench_worker.models.awd_lstm import WeightDropLSTM, ar_tar_penalty, detach_hidden, locked_dropout
    from mlbench_worker.tasks.awd_lstm import AWDLSTMTrainer
    from mlbench_worker.timing.tracker import Tracker
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    bptt, batch = 70, args.awd_batch
    vocab = args.awd_vocab
    tokens = batch * (bptt * 4 + 2) * 2
    ctx = _context(
        "3a",
        {"batch_size": batch, "lr": 30.0, "base_lr": 30.0, "overlap_comm": args.overlap},
        {"source": "synthetic", "options": {"train_tokens": tokens, "val_tokens": 100, "vocab_size": vocab}},
    )
    ours = AWDLSTMTrainer(ctx)
    tracker = Tracker(ctx.device)
    tracker.train()

    class PlainAWD(nn.Module):
        """The reference recipe as commonly written (embedding dropout masks the whole matrix)."""

        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Embedding(vocab, 400)
            sizes = [(400, 1150), (1150, 1150), (1150, 400)]
            self.rnns = nn.ModuleList(WeightDropLSTM(i, h, 0.5) for i, h in sizes)
            self.decoder = nn.Linear(400, vocab)
            self.decoder.weight = self.encoder.weight

        def forward(self, words: Any, hidden: Any) -> Any:
            w = self.encoder.weight
            mask = w.new_empty(w.size(0), 1).bernoulli_(0.9).expand_as(w) / 0.9
            x = locked_dropout(F.embedding(words, w * mask), 0.65, True)
            new_hidden = []
            for i, rnn in enumerate(self.rnns):
                raw, h = rnn(x, hidden[i])
                new_hidden.append(h)
                x = locked_dropout(raw, 0.3, True) if i < 2 else raw
            dropped = locked_dropout(raw, 0.4, True)
            return self.decoder(dropped.reshape(-1, 400)), new_hidden, raw, dropped

    torch.manual_seed(0)
    plain_model = PlainAWD()
    peer = DistributedDataParallel(plain_model)
    peer_opt = torch.optim.SGD(peer.parameters(), lr=30.0, weight_decay=1.2e-6)
    data = ours.train_data
    windows = [
        (data[s : s + bptt], data[s + 1 : s + 1 + bptt], bptt)
        for s in range(0, data.shape[0] - bptt - 1, bptt)
    ]
    zeros = [(torch.zeros(1, batch, h), torch.zeros(1, batch, h)) for h in (1150, 1150, 400)]
    counter = [0]
    plain_hidden = [zeros]

    ours_iter = tracker.each_batch(itertools.cycle(windows))

    def our_step() -> None:
        item, record = next(ours_iter)
        counter[0] += 1
        ours.train_step(item, record)

    def plain_step() -> None:
        inputs, target, seq_len = windows[counter[0] % len(windows)]
        for group in peer_opt.param_groups:
            group["lr"] = 30.0 * seq_len / bptt
        logits, hidden, raw, dropped = peer(inputs, detach_hidden(plain_hidden[0]))
        raw_loss = F.cross_entropy(logits, target.reshape(-1))
        loss = raw_loss + ar_tar_penalty(raw, dropped, 2.0, 1.0)
        peer_opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(peer.parameters(), 0.25)
        peer_opt.step()
        plain_hidden[0] = hidden
        float(raw_loss.item())

    times = _alternate({"ours": our_step, "plain": plain_step}, args.rounds, max(1, args.steps // 10))
    if ctx.rank == 0:
        _print(
            f"3a AWD-LSTM step (400/1150/3, vocab {vocab}), batch {batch}/rank, bptt {bptt}, "
            f"{ctx.world_size} gloo rank(s)",
            times,
        )


def rank_main(args: argparse.Namespace) -> None:
    import torch.distributed as dist
    from mlbench_worker.context import limit_threads

    limit_threads(args.threads)
    dist.init_process_group("gloo")
    if args.task in ("2a", "both"):
        bench_logreg(args)
    if args.task in ("3a", "both"):
        bench_awd(args)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--task", choices=("2a", "3a", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20, help="steps per round (3a uses a tenth)")
    parser.add_argument("--awd-batch", type=int, default=20, help="3a sequences per rank (reference: 80)")
    parser.add_argument("--awd-vocab", type=int, default=33278, help="3a vocabulary (WikiText-2: 33278)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--ranks", type=int, default=2, help="gloo ranks (1 isolates compute from communication)"
    )
    parser.add_argument(
        "--overlap", action="store_true", help="ours: overlap_comm (bucket all-reduces in backward)"
    )
    parser.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_worker:
        rank_main(args)
        return 0
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    argv_rank = [
        torchrun, "--standalone", "--nproc_per_node", str(args.ranks), "--no-python",
        sys.executable, str(Path(__file__).resolve()), "--rank-worker", "--task", args.task,
        "--rounds", str(args.rounds), "--steps", str(args.steps), "--threads", str(args.threads),
        "--awd-batch", str(args.awd_batch), "--awd-vocab", str(args.awd_vocab),
        *(["--overlap"] if args.overlap else []),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    return subprocess.run(argv_rank, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
