"""Transformer base (Vaswani et al. 2017) with PyTorch's fused attention kernels.

Encoder-decoder with post-layer-norm residual blocks as in the paper's base model (6+6 layers,
d_model 512, 8 heads, feed-forward 2048, dropout 0.1), sinusoidal positions, one embedding
matrix shared by source, target and the output projection (the vocabulary is joint), and
embeddings scaled by sqrt(d_model). Attention goes through
``torch.nn.functional.scaled_dot_product_attention`` (flash / memory-efficient kernels on GPU, a
fused CPU kernel otherwise) instead of a custom CUDA extension. ``decode_step`` keeps per-layer
key/value caches for incremental beam search.

The model's entry points run attention under ``VARIABLE_SHAPE_BACKENDS``: cuDNN's attention
builds an execution plan for every new shape, and token-bucketed batches and beam search's
growing prefixes meet a new shape on nearly every call, while the flash and memory-efficient
kernels have no per-shape cost (cuDNN is the default choice for fp16/bf16 on recent GPUs).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

PAD = 0

# Every backend but cuDNN's; MATH stays as the fallback that accepts every input.
VARIABLE_SHAPE_BACKENDS: tuple[SDPBackend, ...] = (
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
)

_P = ParamSpec("_P")
_R = TypeVar("_R")


def variable_shape_attention(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``method`` with attention limited to ``VARIABLE_SHAPE_BACKENDS`` (restored after)."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with sdpa_kernel(list(VARIABLE_SHAPE_BACKENDS)):
            return method(*args, **kwargs)

    return wrapper


@dataclass(frozen=True)
class TransformerConfig:
    """Model sizes; the defaults are Transformer base."""

    vocab_size: int
    d_model: int = 512
    heads: int = 8
    ffn_dim: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1
    max_positions: int = 1024

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by {self.heads} heads")


def sinusoidal_positions(n: int, dim: int) -> torch.Tensor:
    """(n, dim) sinusoids: sin on the first half of the channels, cos on the second (fairseq's layout)."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / max(1, half - 1)))
    angles = torch.arange(n, dtype=torch.float32).unsqueeze(1) * freq.unsqueeze(0)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if dim % 2:
        table = torch.cat([table, torch.zeros(n, 1)], dim=1)
    return table


class Attention(nn.Module):
    """Multi-head attention over ``scaled_dot_product_attention``."""

    def __init__(self, d_model: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split(self.k(memory)), self.split(self.v(memory))

    def forward(
        self,
        x: torch.Tensor,
        kv: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None = None,
        causal: bool = False,
    ) -> torch.Tensor:
        """Attend from ``x`` (B, T, D) to keys/values (B, h, S, d); ``mask`` (B, 1, 1, S) True = attend."""
        q = self.split(self.q(x))
        k, v = kv
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0, is_causal=causal
        )
        b, _, t, _ = out.shape
        return self.out(out.transpose(1, 2).reshape(b, t, -1))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.attn = Attention(cfg.d_model, cfg.heads, cfg.dropout)
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.ffn_dim),
            nn.ReLU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.ffn_dim, cfg.d_model),
        )
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.drop(self.attn(x, self.attn.project_kv(x), mask)))
        return self.norm2(x + self.drop(self.ff(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg.d_model, cfg.heads, cfg.dropout)
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.cross_attn = Attention(cfg.d_model, cfg.heads, cfg.dropout)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.ffn_dim),
            nn.ReLU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.ffn_dim, cfg.d_model),
        )
        self.norm3 = nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: torch.Tensor,
        cross_kv: tuple[torch.Tensor, torch.Tensor],
        src_mask: torch.Tensor,
        cache: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Full sequences (``cache`` None, causal) or one new position appended to ``cache``."""
        k, v = self.self_attn.project_kv(x)
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        x = self.norm1(x + self.drop(self.self_attn(x, (k, v), causal=cache is None)))
        x = self.norm2(x + self.drop(self.cross_attn(x, cross_kv, src_mask)))
        return self.norm3(x + self.drop(self.ff(x)))


class Transformer(nn.Module):
    """The sequence-to-sequence model; ``forward`` gives logits for teacher-forced targets."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD)
        nn.init.normal_(self.embed.weight, mean=0.0, std=cfg.d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[PAD].zero_()
        self.register_buffer(
            "positions", sinusoidal_positions(cfg.max_positions, cfg.d_model), persistent=False
        )
        self.encoder = nn.ModuleList([EncoderLayer(cfg) for _ in range(cfg.encoder_layers)])
        self.decoder = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.decoder_layers)])
        self.drop = nn.Dropout(cfg.dropout)
        self.scale = math.sqrt(cfg.d_model)

    def decoder_layers(self) -> list[DecoderLayer]:
        return [cast(DecoderLayer, layer) for layer in self.decoder]

    def _embed(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        t = tokens.shape[1]
        if start + t > self.cfg.max_positions:
            raise ValueError(f"sequence of {start + t} tokens exceeds max_positions {self.cfg.max_positions}")
        pos = self.positions[start : start + t].to(self.embed.weight.dtype)  # type: ignore[index]
        return self.drop(self.embed(tokens) * self.scale + pos)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder output (B, S, D) and the attention mask (B, 1, 1, S) of real source tokens."""
        mask = (src != PAD)[:, None, None, :]
        x = self._embed(src)
        for layer in self.encoder:
            x = layer(x, mask)
        return x, mask

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.embed.weight)

    @variable_shape_attention
    def forward(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) for the decoder inputs ``tgt_in`` (BOS + target without its EOS)."""
        memory, mask = self.encode(src)
        x = self._embed(tgt_in)
        for layer in self.decoder_layers():
            x = layer(x, layer.cross_attn.project_kv(memory), mask)
        return self._logits(x)

    # -- incremental decoding (beam search) --------------------------------------------------
    @variable_shape_attention
    def start(self, src: torch.Tensor, src_lens: torch.Tensor) -> dict[str, object]:
        memory, mask = self.encode(src)
        cross = [layer.cross_attn.project_kv(memory) for layer in self.decoder_layers()]
        return {"mask": mask, "cross": cross, "caches": [{} for _ in self.decoder], "pos": 0}

    @variable_shape_attention
    def decode_step(
        self, tokens: torch.Tensor, state: dict[str, object]
    ) -> tuple[torch.Tensor, dict[str, object]]:
        """Log-probabilities (N, V) of the next token after ``tokens`` (N,), and the new state."""
        pos = int(state["pos"])  # type: ignore[call-overload]
        caches: list[dict[str, torch.Tensor]] = [dict(c) for c in state["caches"]]  # type: ignore[attr-defined]
        cross: list[tuple[torch.Tensor, torch.Tensor]] = state["cross"]  # type: ignore[assignment]
        x = self._embed(tokens.unsqueeze(1), start=pos)
        for layer, kv, cache in zip(self.decoder, cross, caches, strict=True):
            x = layer(x, kv, state["mask"], cache)
        logprobs = F.log_softmax(self._logits(x[:, -1]).float(), dim=-1)
        return logprobs, {**state, "caches": caches, "pos": pos + 1}

    @staticmethod
    def reorder(state: dict[str, object], index: torch.Tensor) -> dict[str, object]:
        """Select (and repeat) hypotheses ``index`` of the batch dimension."""
        cross = [(k.index_select(0, index), v.index_select(0, index)) for k, v in state["cross"]]  # type: ignore[attr-defined]
        caches = [{n: t.index_select(0, index) for n, t in c.items()} for c in state["caches"]]  # type: ignore[attr-defined]
        return {
            "mask": state["mask"].index_select(0, index),  # type: ignore[attr-defined]
            "cross": cross,
            "caches": caches,
            "pos": state["pos"],
        }
