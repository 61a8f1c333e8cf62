"""Attention on variable shapes never goes to cuDNN's attention backend.

cuDNN's ``scaled_dot_product_attention`` builds a plan for every new shape, and translation meets
new shapes on nearly every call (token-bucketed batches, beam search's growing prefixes). A CPU
cannot run cuDNN, so these tests record which backends are enabled each time the models call
``scaled_dot_product_attention`` (the flags torch's dispatcher chooses from), in training under
reduced-precision autocast and in beam search.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mlbench_worker.data import toy_translation, wmt
from mlbench_worker.data.options import GnmtSynthetic, ToyTranslation, TransformerSynthetic
from mlbench_worker.tasks import gnmt, transformer
from mlbench_worker.translation.batching import collate
from mlbench_worker.translation.beam import beam_search

CORPUS = toy_translation.synthetic(ToyTranslation(train_samples=300, val_samples=20, vocab_words=8), seed=1)
SIZES = {
    "4a": {"hidden_size": 16, "num_layers": 3, "dropout": 0.0},
    "4b": {
        "d_model": 16,
        "heads": 2,
        "ffn_dim": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "dropout": 0.1,
    },
}


def enabled_backends() -> frozenset[str]:
    """The attention backends torch may choose from right now."""
    cuda = torch.backends.cuda
    flags = {
        "cudnn": cuda.cudnn_sdp_enabled(),
        "flash": cuda.flash_sdp_enabled(),
        "efficient": cuda.mem_efficient_sdp_enabled(),
        "math": cuda.math_sdp_enabled(),
    }
    return frozenset(name for name, on in flags.items() if on)


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[torch.dtype, tuple[int, ...], frozenset[str]]]:
    """Every ``scaled_dot_product_attention`` call: query dtype, key shape, backends enabled."""
    calls: list[tuple[torch.dtype, tuple[int, ...], frozenset[str]]] = []
    original = F.scaled_dot_product_attention

    def recording(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, **kwargs: Any
    ) -> torch.Tensor:
        calls.append((q.dtype, tuple(k.shape), enabled_backends()))
        return original(q, k, v, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    return calls


def _model(task: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if task == "4a":
        return gnmt.build_model(CORPUS.vocab_size, GnmtSynthetic(**SIZES[task]))
    return transformer.build_model(CORPUS.vocab_size, TransformerSynthetic(**SIZES[task]))


def _train_and_translate(model: torch.nn.Module) -> None:
    data = CORPUS.length_filtered("train", 100)
    lengths = np.maximum(data.src_lens, data.tgt_lens)
    batches = [np.flatnonzero(lengths == n)[:4] for n in sorted(set(lengths.tolist()))[:4]]
    model.train()
    for index in batches:  # one batch per length: a new shape every step
        b = collate(data, index)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(b.src, b.src_lens, b.tgt_in)
        F.cross_entropy(logits.float().flatten(0, 1), b.tgt_out.flatten(), ignore_index=wmt.PAD).backward()
    model.eval()
    test = collate(CORPUS.length_filtered("test", 100), [0, 1, 2])
    beam_search(model, test.src, test.src_lens, beam=3, max_len=8)


def test_the_transformer_never_offers_cudnn_attention_to_variable_shapes(
    sdpa_calls: list[tuple[torch.dtype, tuple[int, ...], frozenset[str]]],
) -> None:
    assert "cudnn" in enabled_backends()  # torch's default, restored after every model call
    _train_and_translate(_model("4b"))
    assert "cudnn" in enabled_backends()
    assert torch.bfloat16 in {dtype for dtype, _, _ in sdpa_calls}  # the reduced-precision path ran
    assert len({shape for _, shape, _ in sdpa_calls}) >= 8  # the shapes do vary, as on real data
    assert {backends for _, _, backends in sdpa_calls} == {frozenset({"flash", "efficient", "math"})}


def test_gnmt_attention_makes_no_backend_choice(
    sdpa_calls: list[tuple[torch.dtype, tuple[int, ...], frozenset[str]]],
) -> None:
    """GNMT's attention is additive (tanh scores, softmax, a batched matmul): no SDPA call, so no
    fused-attention backend, cuDNN's included, is ever picked for it."""
    _train_and_translate(_model("4a"))
    assert sdpa_calls == []
