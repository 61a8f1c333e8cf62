"""Length-bucketed batches for translation, split into rank shares and accumulation micro-batches.

Every rank computes the same epoch plan from the same seed: pairs are ordered into length
buckets (random order inside a bucket, reshuffled each epoch), cut into micro-batches of a fixed
number of sentences (4a) or of at most ``max_tokens`` padded tokens (4b), and the micro-batches
are shuffled. An optimizer step takes ``world_size * update_freq`` consecutive micro-batches;
rank r gets ``update_freq`` of them, so every rank runs the same number of steps (the last
incomplete step is dropped) and the shares are disjoint.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mlbench_worker.data.device import to_device
from mlbench_worker.data.wmt import BOS, PAD, SplitView, bucket_order


@dataclass(frozen=True)
class Batch:
    """One padded micro-batch: source, its lengths, decoder inputs (BOS-shifted), targets, and
    the number of real target tokens (the loss normaliser, counted on the host when collated).
    ``src_lens`` stays in host memory (packing sequences reads it there)."""

    src: torch.Tensor
    src_lens: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    index: np.ndarray  # positions in the split view (for references)
    tokens: int

    def to(self, device: torch.device) -> Batch:
        """The batch on ``device``, copied through pinned memory without blocking the host."""
        if device.type == "cpu":
            return self
        return Batch(
            to_device(self.src, device),
            self.src_lens,
            to_device(self.tgt_in, device),
            to_device(self.tgt_out, device),
            self.index,
            self.tokens,
        )


def collate(data: SplitView, index: Sequence[int] | np.ndarray) -> Batch:
    """Pad the pairs at ``index``; the decoder input is BOS followed by the target without its EOS."""
    index = np.asarray(index, dtype=np.int64)
    pairs = [data.pair(int(i)) for i in index]
    n = len(pairs)
    s_max = max(len(s) for s, _ in pairs)
    t_max = max(len(t) for _, t in pairs)
    src = np.full((n, s_max), PAD, dtype=np.int64)
    tgt_out = np.full((n, t_max), PAD, dtype=np.int64)
    tgt_in = np.full((n, t_max), PAD, dtype=np.int64)
    for row, (s, t) in enumerate(pairs):
        src[row, : len(s)] = s
        tgt_out[row, : len(t)] = t
        tgt_in[row, 0] = BOS
        tgt_in[row, 1 : len(t)] = t[:-1]
    lens = torch.tensor([len(s) for s, _ in pairs], dtype=torch.int64)
    tokens = sum(len(t) for _, t in pairs)
    return Batch(
        torch.from_numpy(src), lens, torch.from_numpy(tgt_in), torch.from_numpy(tgt_out), index, tokens
    )


def sentence_batches(order: np.ndarray, sentences: int) -> list[np.ndarray]:
    """Consecutive runs of ``sentences`` pairs (the last, shorter run is kept)."""
    if sentences < 1:
        raise ValueError(f"a batch needs at least one sentence, got {sentences}")
    return [order[i : i + sentences] for i in range(0, len(order), sentences)]


def token_batches(order: np.ndarray, lengths: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Greedy runs whose padded size (count x longest side) stays within ``max_tokens``."""
    batches: list[np.ndarray] = []
    start, longest = 0, 0
    for pos, i in enumerate(order):
        length = int(lengths[i])
        if length > max_tokens:
            raise ValueError(f"a pair of {length} tokens does not fit a batch of {max_tokens} tokens")
        new_longest = max(longest, length)
        if pos > start and new_longest * (pos - start + 1) > max_tokens:
            batches.append(order[start:pos])
            start, new_longest = pos, length
        longest = new_longest
    if start < len(order):
        batches.append(order[start:])
    return batches


@dataclass(frozen=True)
class BatchPlan:
    """How an epoch is cut: per-micro-batch sentences or tokens, accumulation and world size."""

    world_size: int
    rank: int
    update_freq: int = 1
    sentences: int | None = None
    max_tokens: int | None = None
    seed: int = 0

    def micro_batches(self, data: SplitView, epoch: int) -> list[np.ndarray]:
        """All micro-batches of the epoch (identical on every rank), shuffled."""
        src_lens, tgt_lens = data.src_lens, data.tgt_lens
        order = bucket_order(src_lens, tgt_lens, seed=self.seed * 1000 + epoch)
        if self.max_tokens is not None:
            batches = token_batches(order, np.maximum(src_lens, tgt_lens), self.max_tokens)
        else:
            batches = sentence_batches(order, int(self.sentences or 1))
        rng = np.random.default_rng((self.seed, epoch))
        return [batches[i] for i in rng.permutation(len(batches))]

    def steps(self, data: SplitView, epoch: int) -> list[list[np.ndarray]]:
        """This rank's micro-batches grouped per optimizer step (``update_freq`` each)."""
        batches = self.micro_batches(data, epoch)
        per_step = self.world_size * self.update_freq
        n_steps = len(batches) // per_step
        if n_steps == 0:
            raise ValueError(
                f"{len(batches)} micro-batches cannot make one step of {self.world_size} rank(s) x "
                f"update_freq {self.update_freq}; use a smaller batch or more data"
            )
        out = []
        for s in range(n_steps):
            first = s * per_step + self.rank * self.update_freq
            out.append(batches[first : first + self.update_freq])
        return out

    def iterate(self, data: SplitView, epoch: int) -> Iterator[list[Batch]]:
        """Collated micro-batches per step, produced lazily (collation is the batch_load phase)."""
        for step in self.steps(data, epoch):
            yield [collate(data, idx) for idx in step]
