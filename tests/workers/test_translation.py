"""Translation machinery: batching, gradient accumulation, schedules, incremental decoding, beam search."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from mlbench_worker.comm import SingleComm
from mlbench_worker.config import parse_config
from mlbench_worker.context import RunContext
from mlbench_worker.data import toy_translation, wmt
from mlbench_worker.data.options import GnmtSynthetic, ToyTranslation, TransformerSynthetic
from mlbench_worker.launch.rendezvous import Rendezvous
from mlbench_worker.tasks import gnmt, transformer
from mlbench_worker.timing.tracker import Tracker
from mlbench_worker.translation.batching import BatchPlan, collate, token_batches
from mlbench_worker.translation.beam import beam_search
from mlbench_worker.translation.schedules import GNMTSchedule, InverseSqrtSchedule
from mlbench_worker.translation.trainer import TranslationTrainer

CORPUS = toy_translation.synthetic(ToyTranslation(train_samples=300, val_samples=20, vocab_words=8), seed=1)
GNMT_SIZES = {"hidden_size": 16, "num_layers": 3, "dropout": 0.0}
TR_SIZES = {
    "d_model": 16,
    "heads": 2,
    "ffn_dim": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "dropout": 0.0,
}


class _Quiet:
    def metric(self, name: str, value: float, **kw: Any) -> None: ...
    def log(self, text: str, stream: str = "stdout") -> None: ...
    def event(self, kind: str, payload: dict[str, Any]) -> None: ...
    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float = 10.0) -> None: ...


def _trainer(task_id: str, hp: dict[str, Any], options: dict[str, Any]) -> TranslationTrainer:
    config = parse_config(
        {
            "run_id": "r-t",
            "task": task_id,
            "backend": "gloo",
            "world_size": 1,
            "seed": 5,
            "data": {"source": "synthetic", "options": {"train_samples": 256, "val_samples": 16, **options}},
            "hyperparameters": hp,
        }
    )
    ctx = RunContext(
        config, Rendezvous(0, 1, 0, None, None, "single"), SingleComm(), torch.device("cpu"), _Quiet()
    )
    return TranslationTrainer(ctx, gnmt.TASK if task_id == "4a" else transformer.TASK)


def test_rank_shares_are_disjoint_equal_and_cover_whole_steps() -> None:
    data = CORPUS.length_filtered("train", 100)
    plans = [BatchPlan(2, r, update_freq=3, sentences=7, seed=1) for r in range(2)]
    steps = [p.steps(data, epoch=1) for p in plans]
    assert len(steps[0]) == len(steps[1]) == len(plans[0].micro_batches(data, 1)) // 6
    seen = np.concatenate([b for s in steps for step in s for b in step])
    assert len(seen) == len(set(seen.tolist()))  # no pair on two ranks or twice
    assert all(len(step) == 3 for step in steps[0])
    assert not np.array_equal(np.concatenate(steps[0][0]), np.concatenate(plans[0].steps(data, epoch=2)[0]))


def test_token_batches_stay_within_their_budget() -> None:
    data = CORPUS.length_filtered("train", 100)
    lengths = np.maximum(data.src_lens, data.tgt_lens)
    order = wmt.bucket_order(data.src_lens, data.tgt_lens)
    batches = token_batches(order, lengths, 60)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(data)))
    for b in batches:
        assert len(b) * lengths[b].max() <= 60
    with pytest.raises(ValueError, match="does not fit"):
        token_batches(order, lengths, 3)


def test_collate_shifts_targets_behind_bos() -> None:
    data = CORPUS.length_filtered("train", 100)
    b = collate(data, [0, 1])
    src0, tgt0 = data.pair(0)
    assert b.src[0, : len(src0)].tolist() == src0.tolist()
    assert b.tgt_in[0, 0] == wmt.BOS and b.tgt_in[0, 1 : len(tgt0)].tolist() == tgt0[:-1].tolist()
    assert b.tgt_out[0, : len(tgt0)].tolist() == tgt0.tolist()
    assert b.tokens == len(tgt0) + len(data.pair(1)[1])


@pytest.mark.parametrize(
    ("task_id", "hp", "options"),
    [
        ("4a", {"global_batch_size": 32}, GNMT_SIZES),
        ("4b", {"global_batch_tokens": 400}, TR_SIZES),
    ],
)
def test_gradient_accumulation_equals_the_large_batch_gradient(
    task_id: str, hp: dict[str, Any], options: dict[str, Any]
) -> None:
    trainer = _trainer(task_id, {**hp, "update_freq": 1}, options)
    step = next(iter(trainer.train_batches(1)))
    (big,) = step
    idx = big.index
    data = trainer.train_data
    micro = [collate(data, part) for part in np.array_split(idx, 4)]

    def grads(batches: list[Any]) -> list[torch.Tensor]:
        trainer.optimizer.zero_grad()
        trainer.accumulate(batches, Tracker().clock.record)
        return [p.grad.detach().clone() for p in trainer.params]  # type: ignore[union-attr]

    whole, accumulated = grads([big]), grads(micro)
    for a, b in zip(whole, accumulated, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert any(float(g.abs().sum()) > 0 for g in whole)


def test_update_freq_divides_the_global_batch() -> None:
    trainer = _trainer("4a", {"global_batch_size": 32, "update_freq": 4}, GNMT_SIZES)
    step = next(iter(trainer.train_batches(1)))
    assert len(step) == 4 and all(len(b.index) == 8 for b in step)
    tokens = _trainer("4b", {"global_batch_tokens": 400, "update_freq": 2}, TR_SIZES)
    assert tokens.plan.max_tokens == 200


def test_gnmt_schedule_warms_up_exponentially_then_decays_in_steps() -> None:
    s = GNMTSchedule(lr=2e-3, total_steps=1000, warmup_steps=200)
    assert s(0) == pytest.approx(2e-3 * 0.01)
    assert s(100) == pytest.approx(2e-3 * 0.1)  # geometric midpoint
    assert s(200) == s(400) == 2e-3
    assert s(401) == pytest.approx(1e-3)  # past 40%: first halving
    assert s(451) == pytest.approx(5e-4)  # every 5% after that
    assert s(999) == pytest.approx(2e-3 / 16)  # at most 4 decays


def test_inverse_sqrt_schedule() -> None:
    s = InverseSqrtSchedule(lr=1.976e-3, warmup_steps=1000)
    assert s(0) == pytest.approx(1.976e-6)
    assert s(999) == pytest.approx(1.976e-3)
    assert s(3999) == pytest.approx(1.976e-3 / 2)


@pytest.mark.parametrize("kind", ["gnmt", "transformer"])
def test_incremental_decoding_matches_the_full_forward(kind: str) -> None:
    torch.manual_seed(0)
    model = (
        gnmt.build_model(CORPUS.vocab_size, GnmtSynthetic(**GNMT_SIZES))
        if kind == "gnmt"
        else transformer.build_model(CORPUS.vocab_size, TransformerSynthetic(**TR_SIZES))
    ).eval()
    b = collate(CORPUS.length_filtered("test", 100), [0, 1, 2])
    with torch.no_grad():
        full = torch.log_softmax(model(b.src, b.src_lens, b.tgt_in).float(), dim=-1)
        state = model.start(b.src, b.src_lens)
        for t in range(b.tgt_in.shape[1]):
            step, state = model.decode_step(b.tgt_in[:, t], state)
            torch.testing.assert_close(step, full[:, t], rtol=1e-4, atol=1e-5)


def test_beam_search_finds_what_greedy_finds_on_a_peaked_model_and_stops_at_eos() -> None:
    class Table(torch.nn.Module):
        """Emits a fixed sequence 7, 8, EOS whatever the input."""

        def start(self, src: torch.Tensor, src_lens: torch.Tensor) -> dict[str, Any]:
            return {"t": torch.zeros(src.shape[0], dtype=torch.long)}

        def decode_step(
            self, tokens: torch.Tensor, state: dict[str, Any]
        ) -> tuple[torch.Tensor, dict[str, Any]]:
            seq = torch.tensor([7, 8, wmt.EOS, wmt.EOS])
            logits = torch.full((tokens.shape[0], 10), -5.0)
            logits[torch.arange(tokens.shape[0]), seq[state["t"].clamp(max=3)]] = 5.0
            return torch.log_softmax(logits, -1), {"t": state["t"] + 1}

        @staticmethod
        def reorder(state: dict[str, Any], index: torch.Tensor) -> dict[str, Any]:
            return {"t": state["t"].index_select(0, index)}

    src = torch.ones(2, 3, dtype=torch.long)
    out = beam_search(Table(), src, torch.tensor([3, 3]), beam=4, max_len=10)
    assert out == [[7, 8], [7, 8]]
    assert beam_search(Table(), src, torch.tensor([3, 3]), beam=2, max_len=1) == [[], []]
