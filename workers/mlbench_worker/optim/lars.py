"""LARS (You, Gitman and Ginsburg 2017, "Large Batch Training of Convolutional Networks") as
MLPerf Training's ResNet reference applies it, and the local update a task's settings ask for.

For each parameter in a LARS group, with learning rate ``lr``, weight decay ``wd``, trust
coefficient ``eta`` and momentum ``m`` (MLPerf's ``LARSOptimizer``, without Nesterov)::

    trust = eta * |w| / (|g| + wd * |w| + eps)   (1 where |w| or |g| is 0)
    v     = m * v + lr * trust * (g + wd * w)
    w     = w - v

Groups marked ``lars=False`` (BatchNorm parameters and biases, the reference's skip list) take
``v = m * v + lr * g`` with no decay. The velocity carries the learning rate, as the reference's
does, and starts at zero. Every quantity stays on the device (no host reads), so the step can be
captured in a CUDA graph, where a tensor learning rate set between replays takes effect.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from mlbench_worker.hyperparams import OptimizerSettings


class LARS(torch.optim.Optimizer):
    """Layer-wise adaptive rate scaling with momentum; see the module docstring for the update."""

    def __init__(
        self,
        params: Iterable[Any],
        *,
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        eta: float = 1e-3,
        epsilon: float = 0.0,
    ) -> None:
        if lr <= 0 or momentum < 0 or weight_decay < 0 or eta <= 0 or epsilon < 0:
            raise ValueError(
                f"LARS needs lr, eta > 0 and momentum, weight_decay, epsilon >= 0; got lr={lr}, "
                f"momentum={momentum}, weight_decay={weight_decay}, eta={eta}, epsilon={epsilon}"
            )
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "eta": eta,
            "epsilon": epsilon,
        }
        defaults["lars"] = True
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        """One update of every parameter that has a gradient."""
        if closure is not None:
            raise ValueError("LARS.step takes no closure")
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            velocity = [self._velocity(p) for p in params]
            lr = group["lr"]
            if group["lars"]:
                decay = group["weight_decay"]
                w_norms = torch.stack(torch._foreach_norm(params))
                g_norms = torch.stack(torch._foreach_norm(grads))
                trust = group["eta"] * w_norms / (g_norms + decay * w_norms + group["epsilon"])
                ones = torch.ones_like(trust)
                trust = torch.where((w_norms > 0) & (g_norms > 0), trust, ones)
                scales = list((trust * lr).to(grads[0].dtype).unbind())
                if decay:
                    update = torch._foreach_add(grads, params, alpha=decay)
                    torch._foreach_mul_(update, scales)
                else:
                    update = torch._foreach_mul(grads, scales)
            else:
                update = torch._foreach_mul(grads, lr)
            torch._foreach_mul_(velocity, group["momentum"])
            torch._foreach_add_(velocity, update)
            torch._foreach_sub_(params, velocity)

    def _velocity(self, p: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if "velocity" not in state:
            state["velocity"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        velocity: torch.Tensor = state["velocity"]
        return velocity


def param_groups(params: list[torch.nn.Parameter], decay_vectors: bool) -> list[dict[str, Any]]:
    """The parameters split into the update's groups: with ``decay_vectors`` False, the
    one-dimensional ones (BatchNorm weights and biases, layer biases) form a group with no weight
    decay and no LARS scaling (``lars: False``)."""
    if decay_vectors:
        return [{"params": params}]
    matrices = [p for p in params if p.ndim > 1]
    vectors = [p for p in params if p.ndim <= 1]
    groups: list[dict[str, Any]] = [{"params": matrices}]
    if vectors:
        groups.append({"params": vectors, "weight_decay": 0.0, "lars": False})
    return groups


def local_optimizer(params: list[torch.nn.Parameter], settings: OptimizerSettings) -> torch.optim.Optimizer:
    """The local update ``settings`` ask for: LARS, or torch's fused SGD (momentum, Nesterov and
    weight decay from the settings)."""
    groups = param_groups(params, settings.decay_vectors)
    if settings.local_update == "lars":
        return LARS(
            groups,
            lr=settings.lr,
            momentum=settings.momentum,
            weight_decay=settings.weight_decay,
            eta=settings.lars_eta,
            epsilon=settings.lars_epsilon,
        )
    for group in groups:
        group.pop("lars", None)
    return torch.optim.SGD(
        groups,
        lr=settings.lr,
        momentum=settings.momentum,
        nesterov=settings.nesterov and settings.momentum > 0,
        weight_decay=settings.weight_decay,
        fused=True,
    )
