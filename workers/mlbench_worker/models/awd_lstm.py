"""AWD-LSTM (Merity, Keskar and Socher 2017), the model of task 3a.

An embedding with embedding dropout, a stack of single-layer LSTMs whose hidden-to-hidden
weights get DropConnect (``WeightDropLSTM``), locked (variational) dropout on the input, between
layers and on the output, and a decoder tied to the embedding, so the last LSTM layer's size is
the embedding size. ``forward`` also returns what activation regularisation (AR, on the dropped
last-layer output) and temporal activation regularisation (TAR, on its raw output) need;
``ar_tar_penalty`` computes both.

Weight drop does not use the original code's trick of deleting the LSTM's parameter and
monkey-patching ``flatten_parameters`` (which newer PyTorch warns about or rejects), nor a swap
of the module's parameter for the call: a changed weight makes ``nn.LSTM`` re-flatten its weights
for cuDNN into a fresh buffer and move every other parameter of the layer there, at each step.
The layer calls the functional ``torch.lstm`` with its own weights and the dropped matrix, so its
parameters never move (CUDA graphs replay on their addresses). Embedding dropout masks only the
looked-up rows (``mask[words]``), which is mathematically the reference's full-matrix masking
without a vocabulary-sized multiply.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

Hidden = list[tuple[torch.Tensor, torch.Tensor]]
WEIGHTS = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")  # torch.lstm's order, one layer


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Variational dropout for ``(seq, batch, features)``: one mask per sequence, shared over time."""
    if not training or p <= 0.0:
        return x
    mask = x.new_empty(1, x.size(1), x.size(2)).bernoulli_(1.0 - p).div_(1.0 - p)
    return x * mask


def embedding_dropout(weight: torch.Tensor, words: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Look up ``words`` with whole vocabulary rows dropped with probability ``p`` (rescaled)."""
    emb = F.embedding(words, weight)
    if not training or p <= 0.0:
        return emb
    keep = weight.new_empty(weight.size(0), 1).bernoulli_(1.0 - p).div_(1.0 - p)
    return emb * F.embedding(words, keep)


class WeightDropLSTM(nn.Module):
    """A one-layer ``nn.LSTM`` with DropConnect on ``weight_hh_l0`` during training."""

    def __init__(self, input_size: int, hidden_size: int, weight_dropout: float) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=1)
        self.weight_dropout = weight_dropout

    def forward(
        self, x: torch.Tensor, hx: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        lstm = self.lstm
        if hx is None:
            zeros = x.new_zeros(1, x.size(1), lstm.hidden_size)
            hx = (zeros, zeros)
        weights: list[torch.Tensor] = [lstm.get_parameter(name) for name in WEIGHTS]
        if self.training and self.weight_dropout > 0.0:
            weights[1] = F.dropout(weights[1], p=self.weight_dropout, training=True)
        with warnings.catch_warnings():
            # cuDNN notes that the weights are not in its packed buffer; with a freshly dropped
            # matrix every step that copy is inherent to weight drop, not a bug.
            warnings.filterwarnings("ignore", message="RNN module weights are not part of single")
            out, h, c = torch.lstm(x, hx, weights, True, 1, 0.0, self.training, False, False)
        return out, (h, c)


@dataclass(frozen=True)
class AWDLSTMConfig:
    """The model's sizes and dropout rates (task 3a defaults: MLBench / Merity et al.)."""

    vocab_size: int
    emb_size: int = 400
    hidden_size: int = 1150
    num_layers: int = 3
    dropout: float = 0.4
    dropouth: float = 0.3
    dropouti: float = 0.65
    dropoute: float = 0.1
    wdrop: float = 0.5
    tie_weights: bool = True


class AWDLSTM(nn.Module):
    """The AWD-LSTM language model: ``(seq, batch)`` token ids -> ``(seq*batch, vocab)`` logits."""

    def __init__(self, cfg: AWDLSTMConfig) -> None:
        super().__init__()
        if cfg.num_layers < 1:
            raise ValueError("num_layers must be >= 1")
        self.cfg = cfg
        self.encoder = nn.Embedding(cfg.vocab_size, cfg.emb_size)
        last = cfg.emb_size if cfg.tie_weights else cfg.hidden_size
        self.sizes = [cfg.hidden_size if i != cfg.num_layers - 1 else last for i in range(cfg.num_layers)]
        inputs = [cfg.emb_size, *self.sizes[:-1]]
        self.rnns = nn.ModuleList(
            WeightDropLSTM(i, h, cfg.wdrop) for i, h in zip(inputs, self.sizes, strict=True)
        )
        self.decoder = nn.Linear(last, cfg.vocab_size)
        if cfg.tie_weights:
            self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def init_hidden(self, batch_size: int) -> Hidden:
        """Zero ``(h, c)`` per layer for ``batch_size`` streams."""
        weight = self.encoder.weight
        return [
            (weight.new_zeros(1, batch_size, size), weight.new_zeros(1, batch_size, size))
            for size in self.sizes
        ]

    def forward(
        self, words: torch.Tensor, hidden: Hidden
    ) -> tuple[torch.Tensor, Hidden, torch.Tensor, torch.Tensor]:
        """Return ``(logits, new_hidden, last_raw_output, last_dropped_output)``."""
        cfg = self.cfg
        emb = embedding_dropout(self.encoder.weight, words, cfg.dropoute, self.training)
        x = locked_dropout(emb, cfg.dropouti, self.training)
        new_hidden: Hidden = []
        raw = x
        for i, rnn in enumerate(self.rnns):
            raw, state = rnn(x, hidden[i])
            new_hidden.append(state)
            x = locked_dropout(raw, cfg.dropouth, self.training) if i != cfg.num_layers - 1 else raw
        dropped = locked_dropout(raw, cfg.dropout, self.training)
        logits = self.decoder(dropped.reshape(-1, dropped.size(2)))
        return logits, new_hidden, raw, dropped


def detach_hidden(hidden: Hidden) -> Hidden:
    """Cut the graph between BPTT windows (truncated back-propagation)."""
    return [(h.detach(), c.detach()) for h, c in hidden]


def ar_tar_penalty(raw: torch.Tensor, dropped: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """AR ``alpha * mean(dropped^2)`` plus TAR ``beta * mean((raw[t+1] - raw[t])^2)``."""
    penalty = raw.new_zeros(())
    if alpha:
        penalty = penalty + alpha * dropped.pow(2).mean()
    if beta and raw.size(0) > 1:
        penalty = penalty + beta * (raw[1:] - raw[:-1]).pow(2).mean()
    return penalty
