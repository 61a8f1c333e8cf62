"""Task 1b's ResNet-50 training step: the worker runtime vs a plain torchvision training loop.

Goal (issue 41): our step at least as fast as the plain loop with the same data, precision and
layout (ratio plain / ours >= 1.0) on CPU with small images, and on a GPU (``gpu_step --task
1b``) at least as fast as plain eager, with CUDA graphs within 1.25x of the whole step in one
graph. Every side trains ResNet-50 v1.5 from the same seed on the same synthetic images (made on
the device by task 1b's data code, flipped and normalised the same way), SGD with momentum 0.9
and weight decay 1e-4, cross-entropy with label smoothing 0.1:

- ``ours``: task 1b's trainer as ``run_training`` drives it (tracker stamps, the poly schedule's
  LR hook, gradients in flat buffers averaged by one all-reduce, fused SGD, the metric window
  read every 10 steps), ``opt_name: sgd`` so the update is the peer's.
- ``plain``: the textbook loop (``zero_grad``, forward, loss, backward, ``torch.optim.SGD`` with
  its defaults; ``DistributedDataParallel`` on more than one rank) on torchvision's ``resnet50``
  where torchvision imports, else on the same architecture (``mlbench_worker.models.resnet50``)
  built plainly; the output says which peer ran.

Both sides run channels_last (1b's default) and, as a second pair, NCHW. Rounds alternate the
order (ABBA); rank 0 prints the median step times, images per second and the median of paired
ratios with a bootstrap 95% interval.

    python -m benchmarks resnet50_step [--ranks 1] [--image-size 32] [--batch 32] [--rounds 10]
        [--steps 1] [--threads 1] [--precision fp32|bf16] [--overlap]
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
sys.path[:0] = [str(ROOT), str(ROOT / "workers")]

from benchmarks.resnet20_step import cycle, runtime_step  # noqa: E402
from benchmarks.stats import median_interval  # noqa: E402

CLASSES = 100
SIDES = ("ours", "plain", "ours-nchw", "plain-nchw")
PAIRS = (("ours", "plain", "channels_last"), ("ours-nchw", "plain-nchw", "NCHW"))


def build_trainer(
    comm: Any,
    device: Any,
    reporter: Any,
    *,
    batch: int,
    image_size: int,
    samples: int,
    classes: int = CLASSES,
    threads: int = 1,
    precision: str = "fp32",
    backend: str = "gloo",
    hp: dict[str, Any] | None = None,
    cuda_graphs: bool = False,
) -> Any:
    """Task 1b's trainer on synthetic images, configured as a run of the task would be."""
    import torch
    from mlbench_worker.config import parse_config
    from mlbench_worker.context import RunContext
    from mlbench_worker.launch.detect import detect_rendezvous
    from mlbench_worker.tasks.resnet50 import ResNet50Trainer

    options = {"train_samples": samples, "val_samples": 8, "image_size": image_size, "num_classes": classes}
    config = parse_config(
        {
            "run_id": "bench",
            "task": "1b",
            "backend": backend,
            "world_size": comm.world_size,
            "threads_per_rank": threads,
            "precision": precision,
            "device": device.type,
            "implementation": {"cuda_graphs": cuda_graphs},
            "data": {"source": "synthetic", "options": options},
            "hyperparameters": {"batch_size": batch, "opt_name": "sgd", "lr": 0.1, **(hp or {})},
        }
    )
    ctx = RunContext(config, detect_rendezvous(), comm, device, reporter)
    torch.manual_seed(0)
    trainer = ResNet50Trainer(ctx)
    trainer.model.train()
    return trainer


def synthetic_batches(
    device: Any, *, batch: int, image_size: int, samples: int, channels_last: bool, classes: int = CLASSES
) -> Callable[[int], Iterator[Any]]:
    """Epochs of the synthetic training batches ``build_trainer``'s trainer reads (the same seeds),
    made without a model: ``epoch -> batches``."""
    from mlbench_worker.data import synthetic_images
    from mlbench_worker.data.image_batches import Normalizer
    from mlbench_worker.data.options import SyntheticImageOptions

    options = SyntheticImageOptions(
        train_samples=samples, val_samples=8, image_size=image_size, num_classes=classes
    )
    shards = synthetic_images.SyntheticBatches(
        synthetic_images.train_shard(options, 0, 1, device),
        synthetic_images.val_shard(options, 0, 1, device),
        Normalizer(device, channels_last),
        seed=1,
        device=device,
    )
    return lambda epoch: shards.train_batches(epoch, batch)


def plain_model(classes: int) -> tuple[Any, str]:
    """torchvision's ResNet-50 (zero-init residuals, as 1b starts), or where torchvision does not
    import, the same architecture built by the project; and which one it is."""
    try:
        import torchvision

        model = torchvision.models.resnet50(num_classes=classes, zero_init_residual=True)
        return model, f"torchvision {torchvision.__version__} resnet50"
    except Exception as exc:  # missing, or built for another torch (as on a CPU-only torch here)
        from mlbench_worker.models.resnet50 import resnet50

        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        peer = (
            f"the same architecture (mlbench_worker.models.resnet50), torchvision does not import "
            f"here ({type(exc).__name__}: {reason[:80]})"
        )
        return resnet50(classes, zero_init_residual=True), peer


def plain_loop(
    batches: Iterator[Any], device: Any, *, channels_last: bool, precision: str, world: int
) -> tuple[Callable[[], None], str]:
    """The textbook training step over ``batches`` (DDP on more than one rank); and the peer's name."""
    import torch

    torch.manual_seed(0)
    model, peer = plain_model(CLASSES)
    model = model.to(device, memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    dtype = torch.bfloat16 if precision == "bf16" else None

    def one() -> None:
        inputs, target = next(batches)
        if not channels_last:
            inputs = inputs.contiguous()
        optimizer.zero_grad()
        if dtype is None:
            loss = loss_fn(model(inputs), target)
        else:
            with torch.autocast(device.type, dtype=dtype):
                loss = loss_fn(model(inputs), target)
        loss.backward()
        optimizer.step()

    return one, peer


def rank_main(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from mlbench_worker.comm import SingleComm, TorchComm
    from mlbench_worker.context import limit_threads
    from mlbench_worker.launch.allocator import tune_host_allocator
    from mlbench_worker.reporting.reporter import Reporter
    from mlbench_worker.timing.tracker import Tracker

    allocator = tune_host_allocator("tuned", os.environ)
    limit_threads(args.threads)
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    comm = TorchComm("gloo") if distributed else SingleComm("gloo")
    device = torch.device("cpu")
    reporter = Reporter(None, "bench", "", comm.rank)
    common: dict[str, Any] = {
        "batch": args.batch,
        "image_size": args.image_size,
        "samples": args.batch * comm.world_size * 4,
        "threads": args.threads,
        "precision": args.precision,
    }
    overlap = {"overlap_comm": args.overlap}
    ours = build_trainer(comm, device, reporter, **common, hp=overlap)
    nchw = build_trainer(comm, device, reporter, **common, hp={**overlap, "channels_last": False})
    sides: dict[str, Callable[[], None]] = {}
    peer = ""
    for name, trainer, last in (("ours", ours, True), ("ours-nchw", nchw, False)):
        tracker = Tracker(device)
        tracker.train()
        sides[name] = runtime_step(trainer, tracker)
        batches = cycle(lambda e, t=trainer: t.train_batches(e))
        plain = "plain" if last else "plain-nchw"
        sides[plain], peer = plain_loop(
            batches, device, channels_last=last, precision=args.precision, world=comm.world_size
        )
    for fn in sides.values():  # warm-up: lazy state, DDP buckets, oneDNN primitives
        for _ in range(2):
            fn()
    times: dict[str, list[float]] = {name: [] for name in SIDES}
    for r in range(args.rounds):
        for name in SIDES if r % 2 == 0 else tuple(reversed(SIDES)):
            if distributed:
                dist.barrier()
            start = time.perf_counter()
            for _ in range(args.steps):
                sides[name]()
            if distributed:
                dist.barrier()
            times[name].append((time.perf_counter() - start) / args.steps)
    if comm.rank == 0:
        report(args, comm.world_size, times, peer, allocator)
    reporter.close(timeout=1.0)
    if distributed:
        dist.destroy_process_group()


def report(
    args: argparse.Namespace, world: int, times: dict[str, list[float]], peer: str, allocator: object
) -> None:
    print(
        f"ResNet-50 v1.5 training step, {args.image_size}x{args.image_size} images, batch {args.batch}/rank, "
        f"{world} gloo rank(s), {args.threads} thread(s)/rank, {args.precision}, {args.rounds} rounds of "
        f"{args.steps} step(s) per side, overlap_comm {'on' if args.overlap else 'off (the task default)'}; "
        f"host allocator: {allocator}"
    )
    print(f"  plain loop's model: {peer}")
    for name in SIDES:
        ms = statistics.median(times[name]) * 1e3
        print(f"  {name:<11} {ms:9.1f} ms/step  {args.batch * world / ms * 1e3:8.1f} images/s")
    for ours, plain, layout in PAIRS:
        ratios = [p / o for o, p in zip(times[ours], times[plain], strict=True)]
        low, high = median_interval(ratios)
        print(
            f"  {layout:<13} plain / ours {statistics.median(ratios):6.3f} (95% interval {low:.3f} .. "
            f"{high:.3f}; faster in {sum(r > 1 for r in ratios)} of {len(ratios)} rounds)   goal: >= 1.0"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1, help="gloo ranks (more than 1: torchrun, DDP peer)")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch", type=int, default=32, help="images per rank per step")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=1, help="steps per side per round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument(
        "--overlap", action="store_true", help="ours with overlap_comm (bucket all-reduces during backward)"
    )
    parser.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_worker or args.ranks == 1:
        rank_main(args)
        return 0
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    argv_rank = [
        torchrun, "--standalone", "--nproc_per_node", str(args.ranks), "--no-python",
        sys.executable, str(Path(__file__).resolve()), "--rank-worker", "--ranks", str(args.ranks),
        "--image-size", str(args.image_size), "--batch", str(args.batch), "--rounds", str(args.rounds),
        "--steps", str(args.steps), "--threads", str(args.threads), "--precision", args.precision,
        *(["--overlap"] if args.overlap else []),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    return subprocess.run(argv_rank, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
