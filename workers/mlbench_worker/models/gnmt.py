"""GNMT (Wu et al. 2016) as in the MLPerf / MLBench reference: residual LSTMs with attention.

Encoder: a bidirectional first LSTM layer (its two directions concatenated), then unidirectional
layers; from the third layer on each layer adds its input (residual). Decoder: the first LSTM
layer runs over the target embeddings and its outputs query a normalised Bahdanau attention
over the encoder outputs; every following layer takes ``[x; context]`` and, from the third
layer on, adds a residual. Training runs each layer over the whole sequence at once (no
per-step loop, as in MLPerf's implementation); ``decode_step`` advances one token for beam
search. Embeddings are shared between encoder and decoder (the vocabulary is joint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

PAD = 0

LSTMState = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class GNMTConfig:
    """Sizes of the model; the defaults are the reference's (4 layers of 1024, dropout 0.2)."""

    vocab_size: int
    hidden_size: int = 1024
    num_layers: int = 4
    dropout: float = 0.2
    share_embedding: bool = True
    init_weight: float = 0.1  # uniform(-w, w) initialisation, the reference's ``init_weight``
    embedding_init_std: float | None = None  # None: embeddings uniform like the rest (reference)

    def __post_init__(self) -> None:
        if self.num_layers < 2:
            raise ValueError("GNMT needs at least 2 layers (a bidirectional one and a unidirectional one)")


class BahdanauAttention(nn.Module):
    """Additive attention with a weight-normalised scoring vector (``normalize=True`` in MLPerf)."""

    def __init__(self, query_size: int, key_size: int, units: int) -> None:
        super().__init__()
        self.linear_q = nn.Linear(query_size, units, bias=False)
        self.linear_k = nn.Linear(key_size, units, bias=False)
        bound = 1.0 / math.sqrt(units)
        self.v = nn.Parameter(torch.empty(units).uniform_(-bound, bound))
        self.norm_scalar = nn.Parameter(torch.tensor(1.0 / math.sqrt(units)))
        self.bias = nn.Parameter(torch.zeros(units))

    def keys(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """Projected keys, computed once per source batch."""
        return self.linear_k(encoder_out)

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Contexts (B, T, H) for queries (B, T, Hq) over keys/values (B, S, H).

        ``mask`` (B, S) is True on real source tokens."""
        q = self.linear_q(query)
        v = self.norm_scalar * self.v / self.v.norm()
        scores = torch.tanh(q.unsqueeze(2) + keys.unsqueeze(1) + self.bias) @ v.to(q.dtype)  # (B, T, S)
        scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
        weights = torch.softmax(scores.float(), dim=-1).to(values.dtype)
        return weights @ values


class GNMT(nn.Module):
    """The sequence-to-sequence model; ``forward`` gives logits for teacher-forced targets."""

    def __init__(self, cfg: GNMTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h, n = cfg.hidden_size, cfg.num_layers
        self.src_embed = nn.Embedding(cfg.vocab_size, h, padding_idx=PAD)
        self.tgt_embed = (
            self.src_embed if cfg.share_embedding else nn.Embedding(cfg.vocab_size, h, padding_idx=PAD)
        )
        self.enc_bi = nn.LSTM(h, h, batch_first=True, bidirectional=True)
        self.enc_layers = nn.ModuleList(
            [nn.LSTM(2 * h if i == 0 else h, h, batch_first=True) for i in range(n - 1)]
        )
        self.dec_att_rnn = nn.LSTM(h, h, batch_first=True)
        self.attention = BahdanauAttention(h, h, h)
        self.dec_layers = nn.ModuleList([nn.LSTM(2 * h, h, batch_first=True) for _ in range(n - 1)])
        self.classifier = nn.Linear(h, cfg.vocab_size)
        self.dropout = nn.Dropout(cfg.dropout)
        for name, p in self.named_parameters():  # the reference's uniform(-0.1, 0.1) init
            if "attention" not in name:
                nn.init.uniform_(p, -cfg.init_weight, cfg.init_weight)
        if cfg.embedding_init_std is not None:
            for emb in {self.src_embed, self.tgt_embed}:
                nn.init.normal_(emb.weight, std=cfg.embedding_init_std)

    # -- encoder ---------------------------------------------------------------------------
    def encode(
        self, src: torch.Tensor, src_lens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encoder outputs (B, S, H), the source mask (B, S) and the projected attention keys."""
        x = self.dropout(self.src_embed(src))
        packed = pack_padded_sequence(x, src_lens.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.enc_bi(packed)
        x, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        for i, layer in enumerate(self.enc_layers):
            y, _ = layer(self.dropout(x))
            x = y + x if i >= 1 else y  # residual from the third layer on
        mask = src != PAD
        return x, mask, self.attention.keys(x)

    # -- decoder ---------------------------------------------------------------------------
    def _decode(
        self,
        tgt_in: torch.Tensor,
        enc: torch.Tensor,
        mask: torch.Tensor,
        keys: torch.Tensor,
        states: list[LSTMState] | None,
    ) -> tuple[torch.Tensor, list[LSTMState]]:
        new_states: list[LSTMState] = []
        x = self.dropout(self.tgt_embed(tgt_in))
        x, st = self.dec_att_rnn(x, states[0] if states else None)
        new_states.append(st)
        context = self.attention(x, keys, enc, mask)
        for i, layer in enumerate(self.dec_layers):
            y, st = layer(self.dropout(torch.cat([x, context], dim=-1)), states[i + 1] if states else None)
            new_states.append(st)
            x = y + x if i >= 1 else y
        return self.classifier(self.dropout(x)), new_states

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) for the decoder inputs ``tgt_in`` (BOS + target without its EOS)."""
        enc, mask, keys = self.encode(src, src_lens)
        logits, _ = self._decode(tgt_in, enc, mask, keys, None)
        return logits

    # -- incremental decoding (beam search) --------------------------------------------------
    def start(self, src: torch.Tensor, src_lens: torch.Tensor) -> dict[str, object]:
        """The decoding state for a source batch."""
        enc, mask, keys = self.encode(src, src_lens)
        return {"enc": enc, "mask": mask, "keys": keys, "states": None}

    def decode_step(
        self, tokens: torch.Tensor, state: dict[str, object]
    ) -> tuple[torch.Tensor, dict[str, object]]:
        """Log-probabilities (N, V) of the next token after ``tokens`` (N,), and the new state."""
        logits, states = self._decode(
            tokens.unsqueeze(1),
            state["enc"],  # type: ignore[arg-type]
            state["mask"],  # type: ignore[arg-type]
            state["keys"],  # type: ignore[arg-type]
            state["states"],  # type: ignore[arg-type]
        )
        return F.log_softmax(logits[:, -1].float(), dim=-1), {**state, "states": states}

    @staticmethod
    def reorder(state: dict[str, object], index: torch.Tensor) -> dict[str, object]:
        """Select (and repeat) hypotheses ``index`` of the batch dimension."""
        out: dict[str, object] = {
            k: v.index_select(0, index) for k, v in state.items() if isinstance(v, torch.Tensor)
        }
        states = cast("list[LSTMState] | None", state.get("states"))
        out["states"] = (
            None
            if states is None
            else [(h.index_select(1, index), c.index_select(1, index)) for h, c in states]
        )
        return out
