"""Batched beam search with GNMT's length penalty, for any model with ``start/decode_step/reorder``.

Hypotheses that emit EOS stay in the beam with a frozen score (their only continuation is EOS at
no cost), and candidates are ranked by ``score / lp(length)`` with
``lp(n) = ((5 + n) / 6) ** alpha`` (Wu et al. 2016), so finished and unfinished hypotheses
compete on the same scale. Search stops when every beam of every sentence has finished or after
``max_len`` tokens; the best normalised hypothesis per sentence is returned without EOS.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from mlbench_worker.data.wmt import BOS, EOS, PAD


class Decodable(Protocol):
    def start(self, src: torch.Tensor, src_lens: torch.Tensor) -> dict[str, Any]: ...

    def decode_step(
        self, tokens: torch.Tensor, state: dict[str, Any]
    ) -> tuple[torch.Tensor, dict[str, Any]]: ...

    @staticmethod
    def reorder(state: dict[str, Any], index: torch.Tensor) -> dict[str, Any]: ...


def length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    return ((5.0 + length.float()) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model: Decodable,
    src: torch.Tensor,
    src_lens: torch.Tensor,
    *,
    beam: int,
    max_len: int,
    alpha: float = 0.6,
) -> list[list[int]]:
    """The best hypothesis (token ids, EOS excluded) for every source sentence of the batch."""
    batch = src.shape[0]
    device = src.device
    state = model.start(src, src_lens)
    expand = torch.arange(batch, device=device).repeat_interleave(beam)
    state = model.reorder(state, expand)
    n = batch * beam
    tokens = torch.full((n,), BOS, dtype=torch.long, device=device)
    scores = torch.zeros(batch, beam, device=device)
    scores[:, 1:] = float("-inf")  # all beams start identical: keep one
    scores = scores.view(-1)
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    lengths = torch.zeros(n, dtype=torch.long, device=device)
    history = torch.zeros((n, 0), dtype=torch.long, device=device)
    for t in range(max_len):
        logp, state = model.decode_step(tokens, state)
        vocab = logp.shape[-1]
        logp[:, PAD] = float("-inf")
        logp[:, BOS] = float("-inf")
        if t == max_len - 1:
            eos_only = torch.full_like(logp, float("-inf"))
            eos_only[:, EOS] = logp[:, EOS]
            logp = eos_only
        frozen = torch.full_like(logp, float("-inf"))
        frozen[:, EOS] = 0.0
        logp = torch.where(finished.unsqueeze(1), frozen, logp)
        cand = scores.unsqueeze(1) + logp  # (n, V)
        cand_len = torch.where(finished, lengths, torch.full_like(lengths, t + 1))
        normed = cand / length_penalty(cand_len, alpha).unsqueeze(1)
        _, top = normed.view(batch, beam * vocab).topk(beam, dim=1)
        origin = (top // vocab) + torch.arange(batch, device=device).unsqueeze(1) * beam
        origin = origin.view(-1)
        new_tokens = (top % vocab).view(-1)
        scores = cand.view(batch, beam * vocab).gather(1, top).view(-1)
        was_finished = finished.index_select(0, origin)
        lengths = torch.where(was_finished, lengths.index_select(0, origin), torch.full_like(lengths, t + 1))
        finished = was_finished | (new_tokens == EOS)
        history = torch.cat([history.index_select(0, origin), new_tokens.unsqueeze(1)], dim=1)
        if bool(finished.all()):
            break
        state = model.reorder(state, origin)
        tokens = new_tokens
    final = (scores / length_penalty(lengths, alpha)).view(batch, beam)
    best = final.argmax(dim=1) + torch.arange(batch, device=device) * beam
    out: list[list[int]] = []
    for row in best.tolist():
        seq = history[row, : int(lengths[row])].tolist()
        out.append([tok for tok in seq if tok not in (EOS, PAD)])
    return out
