"""ResNet-20 training step on 2 gloo ranks: the worker runtime vs a plain DistributedDataParallel loop.

Goal (issues 4 and 17): our step is at least as fast as DDP's in the same layout (ratio DDP time /
our time >= 1.0). Every side trains ResNet-20 from the same weights on the same rank shard with
the same batched augmentation, batch 128 per rank, SGD (momentum 0.9, nesterov, weight decay
1e-4), fp32.

- ``ours``: the real training loop body of task 1a with the task's defaults: tracker stamps for
  every phase, the metric window (read every 10 steps), the fused SGD step with gradients in
  one flat buffer averaged by one all-reduce, the LR schedule hook, and ``channels_last: auto``
  (on CPU the channels_last memory layout, which oneDNN's convolutions run faster).
- ``ours-nchw``: the same with ``channels_last: false``.
- ``ddp``: the textbook DDP loop (PyTorch's default NCHW layout, bucketed all-reduce overlapped
  with backward): like for like with ``ours-nchw``.
- ``ddp-cl``: the same loop on a channels_last model and batches: like for like with ``ours``.

The process is set up as a rank is (``limit_threads``, the host allocator the spec asks for:
``tuned`` by default), and every side runs in it, so all sides share one allocator: the ratio
compares the steps. ``--host-allocator system`` keeps glibc's defaults, under which whether a
side's freed activations are faulted back in on every step depends on where its allocations land
on the heap.

Each round runs K steps of every side, in an order that reverses every round (ABC CBA ...), so
drift on a shared machine hits the sides alike; ranks are pinned to their own cores (the same
for every side) unless ``--no-pin``. Rank 0 prints the median step times, the median of the
per-round ratios with a bootstrap 95% interval, the CPU time of both ranks per step, and our
phase split from the tracker.

    python -m benchmarks resnet20_step [--rounds 40] [--steps 1] [--threads 1] [--overlap]
        [--host-allocator tuned|system]
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
sys.path[:0] = [str(ROOT), str(ROOT / "workers")]  # run as a script by torchrun, too

from mlbench_worker import wire  # noqa: E402

from benchmarks.stats import median_interval  # noqa: E402

SIDES = ("ours", "ours-nchw", "ddp", "ddp-cl")
REPORT_EVERY = 10  # run_training's default report interval
PAIRS = (("ours", "ddp-cl", "ratio DDP-cl/ours"), ("ours-nchw", "ddp", "ratio DDP/ours-nchw"))


def build_trainer(
    comm: Any,
    device: Any,
    reporter: Any,
    *,
    batch: int,
    samples: int,
    threads: int = 1,
    precision: str = "fp32",
    backend: str = "gloo",
    hp: dict[str, Any] | None = None,
    cuda_graphs: bool = False,
) -> Any:
    """Task 1a's trainer on synthetic data, configured as a run of the task would be."""
    import torch
    from mlbench_worker.config import parse_config
    from mlbench_worker.context import RunContext
    from mlbench_worker.launch.detect import detect_rendezvous
    from mlbench_worker.tasks.resnet20 import ResNet20Trainer

    world = comm.world_size
    config = parse_config(
        {
            "run_id": "bench",
            "task": "1a",
            "backend": backend,
            "world_size": world,
            "threads_per_rank": threads,
            "precision": precision,
            "device": device.type,
            "implementation": {"cuda_graphs": cuda_graphs},
            "data": {"source": "synthetic", "options": {"train_samples": samples, "val_samples": 16}},
            "hyperparameters": {"batch_size": batch, "lr": 0.02 * world, "base_lr": 0.02, **(hp or {})},
        }
    )
    ctx = RunContext(config, detect_rendezvous(), comm, device, reporter)
    torch.manual_seed(0)
    trainer = ResNet20Trainer(ctx)
    trainer.model.train()
    return trainer


def cycle(make: Callable[[int], Iterator[Any]]) -> Iterator[Any]:
    """Epoch after epoch of ``make(epoch)``'s items, forever."""
    epoch = 0
    while True:
        epoch += 1
        yield from make(epoch)


def runtime_step(trainer: Any, tracker: Any, step_fn: Callable[..., Any] | None = None) -> Callable[[], None]:
    """One step of ``trainer`` as ``run_training`` drives it: batch start on the tracker, the LR
    hook, the step (``step_fn``, the trainer's own by default), the metric window and its report
    (a read on the host) every ``REPORT_EVERY`` steps."""
    from mlbench_worker.tasks.training import MetricWindow

    batches = tracker.each_batch(cycle(trainer.train_batches))
    window = MetricWindow(trainer.ctx, trainer, tracker)
    run = step_fn or trainer.train_step
    count = [0]

    def one() -> None:
        item, record = next(batches)
        trainer.before_step(count[0])
        window.add(run(item, record))
        count[0] += 1
        if count[0] % REPORT_EVERY == 0:
            window.report(count[0], 1)

    return one


def plain_sgd(model: Any, world: int) -> Any:
    """The optimizer a plain loop would use: ``torch.optim.SGD`` with its defaults (foreach on GPU)."""
    import torch

    return torch.optim.SGD(
        model.parameters(), lr=0.02 * world, momentum=0.9, nesterov=True, weight_decay=1e-4
    )


def rank_main(args: argparse.Namespace) -> None:
    """One rank: build the four sides, run the rounds, report from rank 0."""
    import resource

    import torch
    import torch.distributed as dist
    from mlbench_worker.comm import TorchComm
    from mlbench_worker.context import limit_threads
    from mlbench_worker.data import cifar10
    from mlbench_worker.launch.allocator import tune_host_allocator
    from mlbench_worker.models.resnet import resnet20
    from mlbench_worker.reporting.reporter import Reporter
    from mlbench_worker.timing.tracker import Tracker
    from torch.nn.parallel import DistributedDataParallel

    allocator = tune_host_allocator(args.host_allocator, os.environ)
    limit_threads(args.threads)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cores = sorted(os.sched_getaffinity(0))
    if args.pin and len(cores) >= args.ranks * args.threads:  # the same cores for every side: less noise
        os.sched_setaffinity(0, cores[local_rank * args.threads : (local_rank + 1) * args.threads])
    dist.init_process_group("gloo")
    comm = TorchComm("gloo")
    world = comm.world_size
    batch = 128
    samples = batch * world * max(2, args.steps) * 2

    reporter = Reporter(None, "bench", "", comm.rank)
    device = torch.device("cpu")
    common = {"batch": batch, "samples": samples, "threads": args.threads}
    overlap = {"overlap_comm": args.overlap}
    ours = build_trainer(comm, device, reporter, **common, hp=overlap)  # the task's defaults
    nchw = build_trainer(comm, device, reporter, **common, hp={**overlap, "channels_last": False})
    trackers = {"ours": Tracker(device), "ours-nchw": Tracker(device)}
    for tracker in trackers.values():
        tracker.train()

    def peer(channels_last: bool) -> tuple[Any, Any, Any]:
        torch.manual_seed(0)
        model = resnet20()
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        ddp = DistributedDataParallel(model)
        ddp.train()
        return (
            ddp,
            plain_sgd(ddp, world),
            cifar10.Augmenter(device, seed=comm.rank, channels_last=channels_last),
        )

    loss_fn = torch.nn.CrossEntropyLoss()

    def peer_step(channels_last: bool) -> Callable[[], None]:
        model, optimizer, augmenter = peer(channels_last)
        batches = cycle(
            lambda e: cifar10.train_batches(ours.train_set, augmenter, batch, epoch=e, seed=ours.seed)
        )

        def one() -> None:
            inputs, target = next(batches)
            optimizer.zero_grad()
            loss_fn(model(inputs), target).backward()
            optimizer.step()

        return one

    sides: dict[str, Callable[[], None]] = {
        "ours": runtime_step(ours, trackers["ours"]),
        "ours-nchw": runtime_step(nchw, trackers["ours-nchw"]),
        "ddp": peer_step(False),
        "ddp-cl": peer_step(True),
    }
    for fn in sides.values():  # warm-up (DDP builds its buckets on the first steps)
        for _ in range(2):
            fn()
    times: dict[str, list[float]] = {name: [] for name in SIDES}
    cpu: dict[str, list[float]] = {name: [] for name in SIDES}
    faults: dict[str, list[int]] = {name: [] for name in SIDES}
    for r in range(args.rounds):
        for name in SIDES if r % 2 == 0 else tuple(reversed(SIDES)):
            dist.barrier()
            start, start_cpu = time.perf_counter(), time.process_time()
            start_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for _ in range(args.steps):
                sides[name]()
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start_faults)
            dist.barrier()
            times[name].append((time.perf_counter() - start) / args.steps)
            spent = torch.tensor([(time.process_time() - start_cpu) / args.steps], dtype=torch.float64)
            dist.all_reduce(spent)  # CPU seconds per step, summed over ranks (all threads)
            cpu[name].append(float(spent))
    if comm.rank == 0:
        print(f"host allocator: {allocator}")
        report(args, world, batch, times, cpu, faults, trackers["ours"].totals())
    reporter.close(timeout=1.0)
    dist.destroy_process_group()


def report(
    args: argparse.Namespace,
    world: int,
    batch: int,
    times: dict[str, list[float]],
    cpu: dict[str, list[float]],
    faults: dict[str, list[int]],
    totals: dict[str, float],
) -> None:
    print(
        f"ResNet-20 training step, batch {batch}/rank, {world} gloo ranks, {args.threads} thread(s)/rank, "
        f"fp32, {args.rounds} rounds of {args.steps} step(s) per side, ranks "
        + ("pinned to a core each" if args.pin else "unpinned")
        + ", overlap_comm "
        + ("on" if args.overlap else "off (the task default)")
    )
    for name, label in (
        ("ours", "ours (runtime defaults: channels_last on CPU)"),
        ("ours-nchw", "ours, channels_last off"),
        ("ddp", "plain DDP loop (NCHW)"),
        ("ddp-cl", "plain DDP loop, channels_last"),
    ):
        print(
            f"  {label:<47}: {statistics.median(times[name]) * 1e3:7.1f} ms/step, "
            f"CPU {statistics.median(cpu[name]) * 1e3:5.0f} ms/step (both ranks), "
            f"{statistics.median(faults[name]) / args.steps:7.0f} page faults/step (rank 0)"
        )
    for name, peer, label in PAIRS:  # like for like: the same layout on both sides
        ratios = [d / o for o, d in zip(times[name], times[peer], strict=True)]
        cpu_ratios = [d / o for o, d in zip(cpu[name], cpu[peer], strict=True)]
        low, high = median_interval(ratios)
        print(
            f"  {label:<20}: {statistics.median(ratios):6.3f} wall (95% interval {low:.3f} .. {high:.3f}; "
            f"faster in {sum(r > 1 for r in ratios)} of {len(ratios)} rounds), "
            f"{statistics.median(cpu_ratios):6.3f} CPU time   goal: >= 1.0"
        )
    ddp_ratios = [d / o for o, d in zip(times["ours"], times["ddp"], strict=True)]
    print(f"  ratio DDP (NCHW)/ours (runtime defaults): {statistics.median(ddp_ratios):6.3f} wall")
    phases = {
        k.removeprefix(wire.PHASE_PREFIX): v for k, v in totals.items() if k.startswith(wire.PHASE_PREFIX)
    }
    total = max(1e-9, sum(phases.values()))
    shares = ", ".join(f"{k} {v / total * 100:.1f}%" for k, v in phases.items())
    print(f"  ours, share of step by phase: {shares}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds (every side runs once per round)")
    parser.add_argument("--steps", type=int, default=1, help="steps per side per round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument(
        "--overlap", action="store_true", help="ours with overlap_comm (bucket all-reduces during backward)"
    )
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false",
        help="leave ranks unpinned (by default rank i runs on core i, the same for every side)",
    )  # fmt: skip
    parser.add_argument(
        "--host-allocator", choices=("tuned", "system"), default="tuned",
        help="the process's allocator, as implementation.host_allocator sets a rank's (shared by every side)",
    )  # fmt: skip
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
        "--ranks", str(args.ranks), "--host-allocator", args.host_allocator,
        *(["--overlap"] if args.overlap else []), *([] if args.pin else ["--no-pin"]),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    return subprocess.run(argv_rank, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
