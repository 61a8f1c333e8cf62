"""ResNet-20 training step on 2 gloo ranks: the worker runtime vs a plain DistributedDataParallel loop.

Goal (issue 4): our step is at least as fast as DDP's (ratio DDP time / our time >= 1.0).
Both sides train the same ResNet-20 on the same rank shard with the same batched augmentation,
batch 128 per rank, SGD (momentum 0.9, nesterov, weight decay 1e-4). Ours is the real training
loop body of task 1a: tracker stamps for every phase, CentralizedSGD with gradients bound to one
flat buffer and averaged by one all-reduce, the LR schedule hook. The peer is the textbook DDP
loop (bucketed all-reduce overlapped with backward). Rounds of K steps alternate between the
two (ABBA); rank 0 prints the median step times, the median of the per-round-pair ratios (wall
time, and CPU time of both ranks, which a shared machine's other load does not inflate), and our
phase split from the tracker.

    python benchmarks/resnet20_step.py [--rounds 6] [--steps 4] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workers"))


def rank_main(args: argparse.Namespace) -> None:
    """One rank: build both trainers, alternate timed rounds, report from rank 0."""
    import torch
    import torch.distributed as dist
    from mlbench_worker.comm import TorchComm
    from mlbench_worker.config import parse_config
    from mlbench_worker.context import RunContext, detect_rendezvous, limit_threads
    from mlbench_worker.data import cifar10
    from mlbench_worker.models.resnet import resnet20
    from mlbench_worker.reporter import Reporter
    from mlbench_worker.tasks.resnet20 import ResNet20Trainer
    from mlbench_worker.tasks.training import _iterate
    from mlbench_worker.tracker import Tracker
    from torch.nn.parallel import DistributedDataParallel

    limit_threads(args.threads)
    dist.init_process_group("gloo")
    comm = TorchComm("gloo")
    world = comm.world_size
    batch = 128
    samples = batch * world * args.steps * 2
    config = parse_config(
        {
            "run_id": "bench",
            "task": "1a",
            "backend": "gloo",
            "world_size": world,
            "threads_per_rank": args.threads,
            "data": {"source": "synthetic", "options": {"train_samples": samples, "val_samples": 16}},
            "hyperparameters": {
                "batch_size": batch,
                "lr": 0.02 * world,
                "base_lr": 0.02,
                "warmup_epochs": 0,
                "overlap_comm": args.overlap,
            },
        }
    )
    reporter = Reporter(None, "bench", "", comm.rank)
    ctx = RunContext(config, detect_rendezvous(), comm, torch.device("cpu"), reporter)
    torch.manual_seed(0)
    ours = ResNet20Trainer(ctx)
    tracker = Tracker(ctx.device)
    tracker.train()
    ours.model.train()

    torch.manual_seed(0)
    peer_model = DistributedDataParallel(resnet20())
    peer_model.train()
    peer_opt = torch.optim.SGD(
        peer_model.parameters(), lr=0.02 * world, momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    loss_fn = torch.nn.CrossEntropyLoss()
    augmenter = cifar10.Augmenter(ctx.device, seed=comm.rank)

    def cycle(make: Callable[[int], Iterator[Any]]) -> Iterator[Any]:
        epoch = 0
        while True:
            epoch += 1
            yield from make(epoch)

    ours_batches = cycle(lambda e: _iterate(ours.train_batches(e), tracker))
    peer_batches = cycle(
        lambda e: cifar10.train_batches(ours.train_set, augmenter, batch, epoch=e, seed=config.seed)
    )
    step_counter = [0]

    def our_step() -> None:
        item, record = next(ours_batches)
        ours.before_step(step_counter[0])
        ours.train_step(item, record)
        step_counter[0] += 1

    def peer_step() -> None:
        inputs, target = next(peer_batches)
        peer_opt.zero_grad()
        loss = loss_fn(peer_model(inputs), target)
        loss.backward()
        peer_opt.step()

    sides: dict[str, Callable[[], None]] = {"ours": our_step, "ddp": peer_step}
    for fn in sides.values():  # warm-up (DDP builds its buckets on the first steps)
        for _ in range(2):
            fn()
    times: dict[str, list[float]] = {"ours": [], "ddp": []}
    cpu: dict[str, list[float]] = {"ours": [], "ddp": []}
    for r in range(args.rounds):
        order = ("ours", "ddp") if r % 2 == 0 else ("ddp", "ours")
        for name in order:
            dist.barrier()
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                sides[name]()
            dist.barrier()
            times[name].append((time.perf_counter() - start) / args.steps)
            spent = torch.tensor([(time.process_time() - start_cpu) / args.steps], dtype=torch.float64)
            dist.all_reduce(spent)  # CPU seconds per step, summed over ranks (all threads)
            cpu[name].append(float(spent))
    if comm.rank == 0:
        ours_t, ddp_t = statistics.median(times["ours"]), statistics.median(times["ddp"])
        paired = statistics.median(d / o for o, d in zip(times["ours"], times["ddp"], strict=True))
        ours_c, ddp_c = statistics.median(cpu["ours"]), statistics.median(cpu["ddp"])
        paired_cpu = statistics.median(d / o for o, d in zip(cpu["ours"], cpu["ddp"], strict=True))
        phases = {k[len("phase_") :]: v for k, v in tracker.totals().items() if k.startswith("phase_")}
        total = max(1e-9, sum(phases.values()))
        print(
            f"ResNet-20 training step, batch {batch}/rank, {world} gloo ranks, "
            f"{args.threads} thread(s)/rank, ours with overlap_comm "
            + ("on" if args.overlap else "off (the task default)")
        )
        print(f"  ours (worker runtime)      : {ours_t * 1e3:8.1f} ms/step  (median of {args.rounds} rounds)")
        print(f"  plain DDP loop             : {ddp_t * 1e3:8.1f} ms/step")
        print(f"  ratio DDP/ours (wall)      : {paired:8.3f}  (median of paired rounds; goal: >= 1.0)")
        print(f"  CPU per step, both ranks   : ours {ours_c * 1e3:.0f} ms, DDP {ddp_c * 1e3:.0f} ms")
        print(f"  ratio DDP/ours (CPU time)  : {paired_cpu:8.3f}  (work per step; robust to other load)")
        print(
            "  ours, share of step by phase: "
            + ", ".join(f"{k} {v / total * 100:.1f}%" for k, v in phases.items())
        )
        print(f"  rounds ours (ms)           : {', '.join(f'{t * 1e3:.0f}' for t in times['ours'])}")
        print(f"  rounds ddp  (ms)           : {', '.join(f'{t * 1e3:.0f}' for t in times['ddp'])}")
    reporter.close(timeout=1.0)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument(
        "--overlap", action="store_true", help="ours with overlap_comm (bucket all-reduces during backward)"
    )
    parser.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_worker:
        rank_main(args)
        return 0
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    argv_rank = [
        torchrun, "--standalone", "--nproc_per_node", str(args.ranks), "--no-python",
        sys.executable, str(Path(__file__).resolve()), "--rank-worker",
        "--rounds", str(args.rounds), "--steps", str(args.steps), "--threads", str(args.threads),
        *(["--overlap"] if args.overlap else []),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    return subprocess.run(argv_rank, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
