"""Training steps of tasks 4a (GNMT) and 4b (Transformer) on 2 gloo ranks: ours vs a plain PyTorch loop.

Goal (issue 9): target tokens per second of the worker runtime's step are at least those of a
plain PyTorch loop over the same model and batches (ratio ours/plain >= 1.0), and the share of
the step spent in communication (the ``agg`` phase) at 2 ranks is reported.

- ours: ``TranslationTrainer.train_step``: tracker stamps for every phase, label-smoothed loss,
  ``GradScaler`` (disabled in fp32/bf16), gradients all-reduced in fp32 buckets started during
  backward, or with ``--precision bf16`` in one bf16 all-reduce after it, clipping (4a), Adam,
  the capped scale update. Its communication share is the exposed ``agg`` time (what backward
  did not hide).
- plain: the textbook loop: ``DistributedDataParallel`` (bucketed all-reduce overlapped with
  backward, fp32), ``F.cross_entropy(label_smoothing=0.1, ignore_index=PAD)``, clipping (4a),
  Adam, ``loss.item()``; autocast to bf16 when asked.

Both sides see the same micro-batches; the models are CPU-sized versions of the references
(``--size``; the full models are 160M / 61M parameters). Rounds alternate (ABBA); rank 0 prints
median step times, tokens/s and the median of paired ratios.

    python -m benchmarks translation [--task 4a|4b|both] [--precision fp32|bf16] [--rounds 4] [--steps 5]
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

SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "4a": {
        "small": {"hidden_size": 256, "num_layers": 4, "dropout": 0.2},
        "tiny": {"hidden_size": 64, "num_layers": 2, "dropout": 0.2},
    },
    "4b": {
        "small": {"d_model": 256, "heads": 4, "ffn_dim": 1024, "encoder_layers": 3, "decoder_layers": 3},
        "tiny": {"d_model": 64, "heads": 4, "ffn_dim": 128, "encoder_layers": 2, "decoder_layers": 2},
    },
}


def _context(task: str, hp: dict[str, Any], data: dict[str, Any], precision: str) -> Any:
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
            "precision": precision,
            "data": data,
            "hyperparameters": hp,
        }
    )
    return RunContext(
        config, detect_rendezvous(), comm, torch.device("cpu"), Reporter(None, "bench", "", comm.rank)
    )


def _alternate(sides: dict[str, Callable[[], None]], rounds: int, steps: int) -> dict[str, list[float]]:
    import torch.distributed as dist

    for fn in sides.values():  # warm-up: lazy imports, DDP buckets, allocator, Adam state
        for _ in range(2):
            fn()
    names = list(sides)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(steps):
                sides[name]()
            dist.barrier()
            times[name].append((time.perf_counter() - start) / steps)
    return times


def bench(task_id: str, args: argparse.Namespace) -> None:
    import torch
    import torch.nn.functional as F
    from mlbench_worker.data.wmt import PAD
    from mlbench_worker.tasks import gnmt, transformer
    from mlbench_worker.tasks.steps import autocast_for
    from mlbench_worker.timing.tracker import Tracker
    from mlbench_worker.translation.trainer import TranslationTrainer
    from torch.nn.parallel import DistributedDataParallel

    task = gnmt.TASK if task_id == "4a" else transformer.TASK
    sizes = SIZES[task_id][args.size]
    options = {
        "train_samples": 4096,
        "val_samples": 8,
        "vocab_words": 4000,
        "min_len": 10,
        "max_len": 30,
        **sizes,
    }
    hp: dict[str, Any] = (
        {"global_batch_size": 2 * args.sentences}
        if task_id == "4a"
        else {"global_batch_tokens": 2 * args.tokens}
    )
    ctx = _context(
        task_id, {**hp, "max_epochs": 100}, {"source": "synthetic", "options": options}, args.precision
    )
    ours = TranslationTrainer(ctx, task)
    tracker = Tracker(ctx.device)
    tracker.train()
    torch.manual_seed(0)
    peer_model = task.build_model(ours.corpus.vocab_size, task.options(**sizes))
    peer_model.load_state_dict(ours.model.state_dict())
    peer = DistributedDataParallel(peer_model)
    peer_opt = torch.optim.Adam(peer.parameters(), lr=1e-3, betas=ours.hp.adam_betas)
    autocast = autocast_for(args.precision, torch.device("cpu"))
    clip = ours.grad_clip
    steps = [step for epoch in (1, 2) for step in ours.plan.steps(ours.train_data, epoch)]
    from mlbench_worker.translation.batching import collate

    batches = [[collate(ours.train_data, idx) for idx in step] for step in steps[: max(8, args.steps * 2)]]
    counter = {"ours": 0, "plain": 0}
    tokens_per_step: list[int] = []

    ours_iter = tracker.each_batch(itertools.cycle(batches))

    def our_step() -> None:
        step, record = next(ours_iter)
        counter["ours"] += 1
        ours.before_step(counter["ours"])
        result = ours.train_step(step, record)
        float(result.loss)
        tokens_per_step.append(result.samples)

    def plain_step() -> None:
        (b,) = batches[counter["plain"] % len(batches)]
        counter["plain"] += 1
        peer_opt.zero_grad()
        with autocast():
            logits = peer(b.src, b.src_lens, b.tgt_in)
        loss = (
            F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]),
                b.tgt_out.reshape(-1),
                ignore_index=PAD,
                label_smoothing=0.1,
                reduction="sum",
            )
            / b.tokens
        )
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(peer.parameters(), clip)
        peer_opt.step()
        float(loss.item())

    times = _alternate({"ours": our_step, "plain": plain_step}, args.rounds, args.steps)
    phases = tracker.phase_times()
    comm_share = phases["agg"] / max(1e-12, sum(phases.values()))
    local_tokens = statistics.mean(tokens_per_step)
    if ctx.rank == 0:
        o, p = statistics.median(times["ours"]), statistics.median(times["plain"])
        paired = statistics.median(pl / ou for ou, pl in zip(times["ours"], times["plain"], strict=True))
        n_params = sum(x.numel() for x in ours.params)
        global_tokens = local_tokens * ctx.world_size
        print(
            f"{task_id} {'GNMT' if task_id == '4a' else 'Transformer'} ({args.size}: {sizes}, "
            f"{n_params / 1e6:.1f}M params), {args.precision}, 2 gloo ranks, "
            f"~{global_tokens:.0f} target tokens/step"
        )
        print(f"  ours (worker runtime) : {o * 1e3:8.1f} ms/step  {global_tokens / o:9.0f} tokens/s")
        print(f"  plain PyTorch (DDP)   : {p * 1e3:8.1f} ms/step  {global_tokens / p:9.0f} tokens/s")
        print(f"  ratio ours/plain tok/s: {paired:8.3f}  (median of paired rounds; goal >= 1.0)")
        print(
            f"  communication share   : {100 * comm_share:8.1f} %  (agg phase / all phases, ours, rank 0; "
            f"gradients in {str(ours.comm_dtype).replace('torch.', '')})"
        )


def rank_main(args: argparse.Namespace) -> None:
    import torch.distributed as dist
    from mlbench_worker.context import limit_threads

    limit_threads(args.threads)
    dist.init_process_group("gloo")
    for task_id in ("4a", "4b"):
        if args.task in (task_id, "both"):
            bench(task_id, args)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--task", choices=("4a", "4b", "both"), default="both")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--size", choices=("small", "tiny"), default="small")
    parser.add_argument("--sentences", type=int, default=32, help="4a sentences per rank and step")
    parser.add_argument("--tokens", type=int, default=1024, help="4b padded tokens per rank and step")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5, help="steps per round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_worker:
        rank_main(args)
        return 0
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    argv_rank = [
        torchrun, "--standalone", "--nproc_per_node", "2", "--no-python",
        sys.executable, str(Path(__file__).resolve()), "--rank-worker", "--task", args.task,
        "--precision", args.precision, "--size", args.size, "--sentences", str(args.sentences),
        "--tokens", str(args.tokens), "--rounds", str(args.rounds), "--steps", str(args.steps),
        "--threads", str(args.threads),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    return subprocess.run(argv_rank, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
