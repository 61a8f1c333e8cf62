"""L2-regularised logistic regression for task 2a, as MLBench defined it.

One linear layer without bias (MLBench's ``LogisticRegression``) returning logits; the loss is
binary cross-entropy plus ``l2 / 2 * ||w||^2`` (MLBench's ``BCELossRegularized``), computed from
logits for numerical stability instead of from sigmoid outputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LogisticRegression(nn.Module):
    """``x @ w`` logits for binary classification (no bias, like MLBench's model)."""

    def __init__(self, n_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(n_features, 1, bias=False)
        nn.init.zeros_(self.linear.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).squeeze(-1)


def regularized_bce(logits: torch.Tensor, target: torch.Tensor, model: nn.Module, l2: float) -> torch.Tensor:
    """Mean binary cross-entropy of ``logits`` against 0/1 ``target`` plus ``l2/2 * sum ||p||^2``."""
    loss = F.binary_cross_entropy_with_logits(logits, target.to(logits.dtype))
    if l2:
        loss = loss + (l2 / 2.0) * sum(p.pow(2).sum() for p in model.parameters())
    return loss


def accuracy_counts(logits: torch.Tensor, target: torch.Tensor) -> tuple[int, int]:
    """(correct, total) for a 0.5-probability threshold, i.e. logit > 0."""
    pred = (logits > 0).to(torch.uint8)
    return int((pred == target.to(torch.uint8)).sum()), int(target.numel())
