"""PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019): low-rank gradient compression.

Each matrix-shaped gradient M (a conv kernel is viewed as ``out x (in*kh*kw)``) plus this rank's
error-feedback memory E is approximated by a rank-r product with one step of subspace (power)
iteration, warm-started from the previous step's Q::

    P = (M + E) Q;   all-reduce-mean P;   P = orthonormal(P)
    Q = (M + E)^T P; all-reduce-mean Q;   M_hat = P Q^T;   E = M + E - M_hat

so a ``n x m`` gradient costs ``r (n + m)`` numbers instead of ``n m``. Vectors (biases, norms)
and matrices that rank r would not shrink at least ``min_compression``-fold are all-reduced
uncompressed.
All P factors go in one flat buffer (one all-reduce), all Q factors in another, the
uncompressed rest in a third: three collectives per step whatever the model. Q starts from the
same seeded Gaussian on every rank, and every rank applies the same ``M_hat``, so replicas stay
identical. With ``r >= min(n, m)`` the approximation is exact (the orthonormal P spans the
mean's column space) and PowerSGD reduces to plain all-reduce averaging.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from mlbench_worker.comm import Comm
from mlbench_worker.hyperparams import OptimizerSettings
from mlbench_worker.optim.aggregation import Aggregator
from mlbench_worker.optim.centralized import CentralizedOptimizer
from mlbench_worker.optim.lars import local_optimizer


@dataclass
class _Matrix:
    param: torch.nn.Parameter
    rows: int
    cols: int
    rank: int
    p: torch.Tensor  # view into the flat P buffer, (rows, rank)
    q: torch.Tensor  # view into the flat Q buffer, (cols, rank)
    error: torch.Tensor  # (rows, cols) error-feedback memory


class PowerSGDAggregator(Aggregator):
    """Averages gradients over ranks through rank-``rank`` PowerSGD with error feedback.

    Not capturable in a CUDA graph: its QR factorisations take host-side steps."""

    capturable = False

    def __init__(
        self,
        comm: Comm,
        params: Sequence[torch.nn.Parameter],
        *,
        rank: int = 1,
        min_compression: float = 2.0,
        seed: int = 0,
    ) -> None:
        super().__init__(comm, params)
        if rank < 1:
            raise ValueError(f"powersgd_rank must be >= 1, got {rank}")
        self.rank = rank
        self.matrices: list[_Matrix] = []
        self.uncompressed: list[torch.nn.Parameter] = []
        planned: list[tuple[torch.nn.Parameter, int, int, int]] = []
        for p in self.params:
            if p.dim() >= 2:
                rows, cols = p.shape[0], p.numel() // p.shape[0]
                r = min(rank, rows, cols)
                if rows * cols >= min_compression * r * (rows + cols):
                    planned.append((p, rows, cols, r))
                    continue
            self.uncompressed.append(p)
        ref = self.params[0] if self.params else torch.zeros(0)
        dtype, device = ref.dtype, ref.device
        self._p_flat = torch.zeros(sum(n * r for _, n, _, r in planned), dtype=dtype, device=device)
        self._q_flat = torch.zeros(sum(m * r for _, _, m, r in planned), dtype=dtype, device=device)
        self._rest_flat = torch.zeros(sum(p.numel() for p in self.uncompressed), dtype=dtype, device=device)
        generator = torch.Generator(device="cpu").manual_seed(seed)
        p_off = q_off = 0
        for p, rows, cols, r in planned:
            pv = self._p_flat[p_off : p_off + rows * r].view(rows, r)
            qv = self._q_flat[q_off : q_off + cols * r].view(cols, r)
            qv.copy_(torch.randn(cols, r, generator=generator, dtype=torch.float32))
            error = torch.zeros(rows, cols, dtype=dtype, device=device)
            self.matrices.append(_Matrix(p, rows, cols, r, pv, qv, error))
            p_off += rows * r
            q_off += cols * r

    @property
    def does_work(self) -> bool:
        return True  # compression and error feedback change the gradient even on one rank

    # -- accounting -------------------------------------------------------------------------------
    def elements_per_step(self) -> int:
        """Numbers each rank sends into all-reduces per step (P, Q and the uncompressed rest)."""
        return int(self._p_flat.numel() + self._q_flat.numel() + self._rest_flat.numel())

    def full_elements(self) -> int:
        """Numbers a plain all-reduce of every gradient would send per step."""
        return sum(p.numel() for p in self.params)

    def bytes_per_step(self) -> int:
        """``elements_per_step`` in bytes."""
        return self.elements_per_step() * self._p_flat.element_size()

    # -- the step --------------------------------------------------------------------------------
    def aggregate(self) -> None:
        comm = self.comm
        if self.uncompressed:
            self._exchange_rest(comm)
        if not self.matrices:
            return
        inputs: list[torch.Tensor] = []
        for mat in self.matrices:
            grad = mat.param.grad
            m = mat.error if grad is None else grad.reshape(mat.rows, mat.cols) + mat.error
            inputs.append(m)
            torch.matmul(m, mat.q, out=mat.p)
        if comm.world_size > 1:
            comm.all_reduce(self._p_flat, "avg")
        for mat in self.matrices:
            mat.p.copy_(_orthonormal(mat.p))
        for mat, m in zip(self.matrices, inputs, strict=True):
            torch.matmul(m.t(), mat.p, out=mat.q)
        if comm.world_size > 1:
            comm.all_reduce(self._q_flat, "avg")
        for mat, m in zip(self.matrices, inputs, strict=True):
            approx = mat.p @ mat.q.t()
            torch.sub(m, approx, out=mat.error)
            if mat.param.grad is None:
                mat.param.grad = approx.view_as(mat.param)
            else:
                mat.param.grad.copy_(approx.view_as(mat.param))

    def _exchange_rest(self, comm: Comm) -> None:
        offset = 0
        for p in self.uncompressed:
            n = p.numel()
            chunk = self._rest_flat[offset : offset + n]
            if p.grad is None:
                chunk.zero_()
            else:
                chunk.copy_(p.grad.reshape(-1))
            offset += n
        if comm.world_size > 1:
            comm.all_reduce(self._rest_flat, "avg")
        offset = 0
        for p in self.uncompressed:
            n = p.numel()
            chunk = self._rest_flat[offset : offset + n].view_as(p)
            if p.grad is None:
                p.grad = chunk.clone()
            else:
                p.grad.copy_(chunk)
            offset += n


def _orthonormal(p: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis (columns) whose span contains ``p``'s columns (Householder QR)."""
    if p.dtype in (torch.float16, torch.bfloat16):
        return torch.linalg.qr(p.float(), mode="reduced").Q.to(p.dtype)
    return torch.linalg.qr(p, mode="reduced").Q


def power_sgd(
    params: Iterable[torch.nn.Parameter], comm: Comm, settings: OptimizerSettings
) -> CentralizedOptimizer:
    """SGD (``momentum``, ``nesterov``, ``weight_decay`` from ``settings``; LARS where they ask for
    it) on PowerSGD-averaged gradients.

    ``powersgd_rank`` (1) sets the rank; momentum is applied to the decompressed average, as in
    the paper's experiments.
    """
    plist = [p for p in params if p.requires_grad]
    aggregator = PowerSGDAggregator(comm, plist, rank=settings.powersgd_rank)
    return CentralizedOptimizer(local_optimizer(plist, settings), aggregator)
