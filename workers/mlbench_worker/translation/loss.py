"""Label-smoothed cross-entropy over target tokens, ignoring padding (Szegedy et al. 2016).

With smoothing ``eps`` the target distribution puts ``1 - eps`` on the reference token and
spreads ``eps`` uniformly over the vocabulary, so the loss is
``(1 - eps) * nll + eps * mean_v(-log p_v)``. Sums are returned (not means) so gradient
accumulation can normalise by the token count of the whole optimizer step. Padding is masked by
``where`` rather than selected out, so the output's size never depends on the data (selecting
would make the host wait for the device to learn the size).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

PAD = 0


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad: int = PAD
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed (smoothed loss, plain NLL) over the non-padding tokens of ``target`` (B, T)."""
    logprobs = F.log_softmax(logits.float(), dim=-1)
    mask = target != pad
    zero = logprobs.new_zeros(())
    nll = torch.where(mask, -logprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1), zero).sum()
    if smoothing <= 0:
        return nll, nll.detach()
    smooth = torch.where(mask, -logprobs.mean(dim=-1), zero).sum()
    return (1.0 - smoothing) * nll + smoothing * smooth, nll.detach()
