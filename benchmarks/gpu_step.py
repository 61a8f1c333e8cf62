"""Task 1a's (ResNet-20) or 1b's (ResNet-50) training step on one GPU: plain PyTorch vs the
worker runtime, eager and CUDA graphs.

Goals (issues 17 and 41): ours eager at least as fast as a plain eager loop doing the same work
(ratio plain / ours >= 1.0), and ours with ``cuda_graphs`` within 1.25x of a plain loop captured
whole in one CUDA graph, the floor (ratio floor / ours >= 0.8). Every side trains the task's model
on the same synthetic data resident on the GPU, SGD with momentum 0.9, one rank. 1a: ResNet-20 at
batch 128 on CIFAR-10 with the same on-device augmentation, Nesterov, weight decay 1e-4, fp32
(NCHW) and bf16 autocast (channels_last). 1b: ResNet-50 v1.5 at batch 128 (``--batch``) on
224x224 images (``--image-size``) made by task 1b's synthetic data code, weight decay 1e-4, label
smoothing 0.1, fp32 and bf16, both channels_last (1b's layout); its plain loop runs
torchvision's ``resnet50`` where torchvision imports, else the same architecture built by the
project (the table says which).

- ``plain eager``: the textbook loop (``zero_grad``, forward, loss, backward, ``torch.optim.SGD``
  with its defaults, which are foreach on a GPU).
- ``plain graph``: the same step captured whole in one CUDA graph (torch's recipe), the floor.
- ``ours eager``: the task's trainer driven like ``run_training`` drives it (tracker events for
  every phase, the LR hook, the metric window read every 10 steps).
- ``ours graphs``: the same through ``GraphedStep`` (one graph per phase, events between them).

Rounds alternate the order of the sides; the table gives the median ms/step, images/s and the
share of wall time the GPU spent running kernels (torch's profiler over a few steps). On a
machine without an NVIDIA GPU it says so and exits 0.

``--smoke`` runs every side's code on the CPU in seconds (captures through ``ReplayCapture``).

    python -m benchmarks gpu_step [--task 1a|1b] [--rounds 5] [--steps 50] [--batch 128]
        [--image-size 224] [--smoke]
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "workers")]

from benchmarks import resnet50_step  # noqa: E402
from benchmarks.resnet20_step import REPORT_EVERY, build_trainer, cycle, plain_sgd, runtime_step  # noqa: E402

SIDES = ("plain eager", "plain graph", "ours eager", "ours graphs")
PRECISIONS = {  # task -> (precision, channels_last) pairs
    "1a": (("fp32", False), ("bf16", True)),
    "1b": (("fp32", True), ("bf16", True)),
}
TITLES = {"1a": "ResNet-20 (task 1a)", "1b": "ResNet-50 v1.5 (task 1b)"}


def no_gpu_message() -> str | None:
    """Why this machine cannot run a GPU benchmark, or None when it can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"no NVIDIA GPU is visible to torch {torch.__version__} (torch.cuda.is_available() is False)"
    return None


def side_builders(
    precision: str, channels_last: bool, batch: int, smoke: bool, *, task: str = "1a", image_size: int = 224
) -> dict[str, Callable[[], Callable[[], None]]]:
    """How to build each of the four sides (one step per call), on the GPU, or with ``smoke`` on
    the CPU with every capture going through ``ReplayCapture`` (the same static buffers, copy-in
    and replays, run eagerly). A side is built only when asked for, so one can run alone."""
    import torch
    from mlbench_worker.comm import SingleComm
    from mlbench_worker.data import cifar10
    from mlbench_worker.devices.graphs import Capture, CudaCapture, GraphedStep
    from mlbench_worker.devices.replay_capture import ReplayCapture
    from mlbench_worker.models.resnet import resnet20
    from mlbench_worker.reporting.reporter import Reporter
    from mlbench_worker.timing.tracker import Tracker

    device = torch.device("cpu") if smoke else torch.device("cuda", torch.cuda.current_device())
    backend = "gloo" if smoke else "nccl"

    def capture() -> Capture:
        return ReplayCapture() if smoke else CudaCapture(device)

    comm = SingleComm(backend)
    reporter = Reporter(None, "bench", "", 0)  # no server: what the step reports is dropped
    samples = batch * (4 if smoke else 40)  # whole batches only: every side sees one input shape
    hp = {"channels_last": channels_last}
    common: dict[str, Any] = {
        "batch": batch,
        "samples": samples,
        "precision": precision,
        "backend": backend,
        "hp": hp,
    }

    def make_trainer(graphs: bool = False) -> Any:
        if task == "1b":
            return resnet50_step.build_trainer(
                comm, device, reporter, **common, image_size=image_size, cuda_graphs=graphs and not smoke
            )
        return build_trainer(comm, device, reporter, **common, cuda_graphs=graphs and not smoke)

    def ours(graphs: bool) -> Callable[[], None]:
        trainer = make_trainer(graphs)
        tracker = Tracker(device)
        tracker.train()
        if not graphs:
            return runtime_step(trainer, tracker)
        runner = GraphedStep(trainer, capture(), aside=tracker.aside)
        return runtime_step(trainer, tracker, runner.train_step)

    if task == "1b":  # the images 1b's trainer makes, flipped and normalised as it does
        images = resnet50_step.synthetic_batches(
            device, batch=batch, image_size=image_size, samples=samples, channels_last=channels_last
        )
    else:
        reference = make_trainer()
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    autocast_dtype = torch.bfloat16 if precision == "bf16" else None
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1 if task == "1b" else 0.0)

    def plain_parts() -> tuple[Any, Any, Iterator[Any]]:
        torch.manual_seed(0)
        if task == "1b":
            model = resnet50_step.plain_model(resnet50_step.CLASSES)[0].to(
                device, memory_format=memory_format
            )
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
            return model, optimizer, cycle(images)
        model = resnet20().to(device, memory_format=memory_format)
        augmenter = cifar10.Augmenter(device, seed=1, channels_last=channels_last)
        data, seed = reference.train_set, reference.seed
        batches = cycle(lambda e: cifar10.train_batches(data, augmenter, batch, epoch=e, seed=seed))
        return model, plain_sgd(model, 1), batches

    def forward_loss(model: Any, inputs: Any, target: Any) -> Any:
        if autocast_dtype is None:
            return loss_fn(model(inputs), target)
        with torch.autocast(device.type, dtype=autocast_dtype, cache_enabled=False):
            return loss_fn(model(inputs), target)

    def plain_eager() -> Callable[[], None]:
        model, optimizer, batches = plain_parts()

        def one() -> None:
            inputs, target = next(batches)
            optimizer.zero_grad()
            forward_loss(model, inputs, target).backward()
            optimizer.step()

        return one

    def plain_graph() -> Callable[[], None]:
        """torch's whole-network recipe: warm up, capture forward, backward and step in one graph
        (gradients made inside it), then refill the static batch before each replay. The side
        keeps its model and optimizer: the graph updates their memory but does not own it."""
        model, optimizer, batches = plain_parts()
        static_inputs, static_target = (t.clone() for t in next(batches))
        graphs = capture()

        def whole() -> None:
            forward_loss(model, static_inputs, static_target).backward()
            optimizer.step()

        def warmup() -> None:
            for _ in range(3):
                optimizer.zero_grad(set_to_none=True)
                whole()

        graphs.warmup(warmup)
        optimizer.zero_grad(set_to_none=True)
        (replay,) = graphs.capture([whole])
        assert replay is not None

        def one() -> None:
            inputs, target = next(batches)
            static_inputs.copy_(inputs)
            static_target.copy_(target)
            replay()

        return functools.partial(_keeping, one, (model, optimizer))

    return {
        "plain eager": plain_eager,
        "plain graph": plain_graph,
        "ours eager": lambda: ours(False),
        "ours graphs": lambda: ours(True),
    }


def _keeping(step: Callable[[], None], owned: tuple[Any, ...]) -> None:
    """Run ``step``; bound with ``functools.partial``, the side holds ``owned`` (what its graph
    writes: a graph holds addresses, not tensors) for as long as it lives."""
    step()


def _busy_share(step: Callable[[], None], steps: int) -> float:
    """The share of wall time the GPU spent in kernels over ``steps`` steps (torch's profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    busy_us = sum(event.self_device_time_total for event in prof.key_averages())
    return busy_us / 1e6 / wall


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    def sync() -> None:
        if not args.smoke:
            torch.cuda.synchronize()

    rows: list[dict[str, Any]] = []
    for precision, channels_last in PRECISIONS[args.task]:
        builders = side_builders(
            precision, channels_last, args.batch, args.smoke, task=args.task, image_size=args.image_size
        )
        sides = {name: build() for name, build in builders.items()}
        for fn in sides.values():  # warm-up: cuDNN plans, lazy state, the first capture
            for _ in range(1 if args.smoke else REPORT_EVERY + 2):
                fn()
        times: dict[str, list[float]] = {name: [] for name in SIDES}
        for r in range(args.rounds):
            for name in SIDES if r % 2 == 0 else tuple(reversed(SIDES)):
                sync()
                start = time.perf_counter()
                for _ in range(args.steps):
                    sides[name]()
                sync()
                times[name].append((time.perf_counter() - start) / args.steps)
        for name in SIDES:
            ms = statistics.median(times[name]) * 1e3
            busy = math.nan if args.smoke else _busy_share(sides[name], min(args.steps, 20))
            rows.append({"precision": precision, "side": name, "ms": ms, "busy": busy})
        del sides
        if not args.smoke:
            torch.cuda.empty_cache()
    return rows


def report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    import torch

    where = (
        "the CPU (smoke: code paths only, graphs through ReplayCapture)"
        if args.smoke
        else (torch.cuda.get_device_name())
    )
    size = f", {args.image_size}x{args.image_size}" if args.task == "1b" else ""
    print(
        f"\n{TITLES[args.task]} training step on {where}, batch {args.batch}{size}, one rank, "
        f"torch {torch.__version__}, median of {args.rounds} rounds of {args.steps} steps per side"
    )
    if args.task == "1b":
        print(f"  plain loop's model: {resnet50_step.plain_model(2)[1]}")
    layouts = {p: f"{p} {'channels_last' if cl else 'NCHW'}" for p, cl in PRECISIONS[args.task]}
    print(f"  {'precision':<17} {'side':<12} {'ms/step':>8} {'images/s':>9} {'GPU busy':>9}")
    for row in rows:
        layout = layouts[row["precision"]]
        busy = "n/a" if math.isnan(row["busy"]) else f"{row['busy'] * 100:.0f}%"
        print(
            f"  {layout:<17} {row['side']:<12} {row['ms']:8.2f} {args.batch / row['ms'] * 1e3:9.0f} {busy:>9}"
        )
    for precision, _ in PRECISIONS[args.task]:
        ms = {r["side"]: r["ms"] for r in rows if r["precision"] == precision}
        eager = ms["plain eager"] / ms["ours eager"]
        graphs = ms["plain graph"] / ms["ours graphs"]
        gain = ms["ours eager"] / ms["ours graphs"]
        print(
            f"  {precision}: plain eager / ours eager {eager:.3f} (goal >= 1.0), floor / ours graphs "
            f"{graphs:.3f} (goal >= 0.8), ours eager / ours graphs {gain:.2f}x"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (every side runs once per round)")
    parser.add_argument("--steps", type=int, default=50, help="steps per side per round")
    parser.add_argument("--task", choices=tuple(PRECISIONS), default="1a")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=224, help="1b's image size")
    parser.add_argument(
        "--smoke", action="store_true",
        help="run every side's code on the CPU in seconds (tiny batch, graphs through ReplayCapture)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.smoke:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as a rank of one core: tiny steps, no oversubscription on a busy host
        args.batch, args.rounds, args.steps = min(args.batch, 4), 1, 1
        args.image_size = min(args.image_size, 32)
        try:
            report(args, measure(args))
        finally:
            torch.set_num_threads(threads)
        return 0
    reason = no_gpu_message()
    if reason is not None:
        print(f"gpu_step: nothing to measure: {reason}")
        return 0
    report(args, measure(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
