"""Collective communication behind one small interface, so tasks never care about the backend.

``TorchComm`` wraps ``torch.distributed`` (gloo, nccl); ``MpiComm`` wraps mpi4py because PyPI
torch is built without the MPI backend: tensors go through numpy views of the same memory, so a
CPU tensor is reduced in place without a copy. ``SingleComm`` is the world of one rank (no
process group at all). All collectives are in place on the given tensor, like
``torch.distributed``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, Literal

import torch

ReduceOp = Literal["sum", "avg", "max", "min"]


class Pending:
    """A started collective; ``wait()`` blocks until its result is in the tensor."""

    def __init__(self, work: Any = None, then: Callable[[], Any] | None = None) -> None:
        self._work = work
        self._then = then

    def wait(self) -> None:
        if self._work is not None:
            self._work.wait()
            self._work = None
        if self._then is not None:
            then, self._then = self._then, None
            then()


class Comm(abc.ABC):
    """The collectives the worker runtime and the tasks need."""

    backend: str
    rank: int
    world_size: int
    #: where small control tensors (flags, metric sums) must live for this backend
    control_device: torch.device = torch.device("cpu")
    _flag: torch.Tensor | None = None  # share_from_rank0's, made on first use

    @abc.abstractmethod
    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> None:
        """Reduce ``tensor`` over all ranks, in place; every rank ends with the result."""

    def all_reduce_async(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> Pending:
        """Start ``all_reduce`` and return at once; the result is there after ``wait()``.

        Every rank must start its collectives in the same order. Backends without non-blocking
        collectives complete the reduction before returning.
        """
        self.all_reduce(tensor, op)
        return Pending()

    @abc.abstractmethod
    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        """Overwrite ``tensor`` on every rank with rank ``src``'s tensor."""

    @abc.abstractmethod
    def barrier(self) -> None:
        """Wait until every rank reaches this point."""

    @abc.abstractmethod
    def allgather_object(self, obj: Any) -> list[Any]:
        """Every rank's picklable ``obj``, indexed by rank (for small objects only)."""

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s picklable ``obj`` on every rank (for small objects only)."""
        return self.allgather_object(obj)[src]

    def share_from_rank0(self, value: int) -> int:
        """Rank 0's ``value`` on every rank, through one small broadcast (a stop decision)."""
        flag = self._flag
        if flag is None:
            flag = self._flag = torch.zeros(1, dtype=torch.int64, device=self.control_device)
        flag[0] = value
        self.broadcast(flag, src=0)
        return int(flag[0])

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        """Whether ``all_reduce`` handles this dtype natively on this backend."""
        return True

    def abort(self, code: int) -> None:
        """Tear down after a failure so no peer waits forever; default: nothing to do."""
        return None

    def close(self) -> None:
        """Release the process group at a clean end."""
        return None

    def version(self) -> str:
        """The backend's version string for the environment fingerprint."""
        return self.backend


class SingleComm(Comm):
    """One rank, no communication: every collective is the identity."""

    def __init__(self, backend: str = "gloo") -> None:
        self.backend = backend
        self.rank = 0
        self.world_size = 1

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> None:
        return None

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        return None

    def barrier(self) -> None:
        return None

    def allgather_object(self, obj: Any) -> list[Any]:
        return [obj]


class TorchComm(Comm):
    """``torch.distributed`` with an initialised default process group (gloo or nccl)."""

    def __init__(self, backend: str) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.backend = backend
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        ops = dist.ReduceOp
        self._ops = {"sum": ops.SUM, "max": ops.MAX, "min": ops.MIN}
        # gloo has no AVG; nccl does. Averaging is then a sum and one in-place division.
        self._native_avg = backend == "nccl"
        if backend == "nccl":
            self.control_device = torch.device("cuda", torch.cuda.current_device())

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> None:
        if op == "avg":
            if self._native_avg:
                self._dist.all_reduce(tensor, op=self._dist.ReduceOp.AVG)
            else:
                self._dist.all_reduce(tensor, op=self._ops["sum"])
                tensor.div_(self.world_size)
            return
        self._dist.all_reduce(tensor, op=self._ops[op])

    def all_reduce_async(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> Pending:
        if op == "avg" and not self._native_avg:
            work = self._dist.all_reduce(tensor, op=self._ops["sum"], async_op=True)
            return Pending(work, lambda: tensor.div_(self.world_size))
        reduce_op = self._dist.ReduceOp.AVG if op == "avg" else self._ops[op]
        return Pending(self._dist.all_reduce(tensor, op=reduce_op, async_op=True))

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        self._dist.broadcast(tensor, src=src)

    def barrier(self) -> None:
        self._dist.barrier()

    def allgather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        box = [obj]
        self._dist.broadcast_object_list(box, src=src)
        return box[0]

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        if self.backend == "gloo":
            return dtype in (
                torch.float32,
                torch.float64,
                torch.float16,
                torch.bfloat16,
                torch.int32,
                torch.int64,
                torch.uint8,
                torch.int8,
            )
        return True

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()

    def version(self) -> str:
        if self.backend == "nccl" and torch.cuda.is_available():
            try:
                major, minor, patch = torch.cuda.nccl.version()
                return f"nccl {major}.{minor}.{patch}"
            except Exception:
                return "nccl"
        return f"{self.backend} (torch {torch.__version__})"


class MpiComm(Comm):
    """mpi4py's ``COMM_WORLD``; CPU tensors are reduced in place through numpy views."""

    def __init__(self) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self._comm = MPI.COMM_WORLD
        self.backend = "mpi"
        self.rank = self._comm.Get_rank()
        self.world_size = self._comm.Get_size()
        self._ops = {"sum": MPI.SUM, "avg": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}

    def _host_array(self, tensor: torch.Tensor) -> tuple[Any, torch.Tensor]:
        """A contiguous CPU tensor sharing memory with ``tensor`` when possible, and its numpy view."""
        host = tensor
        if host.device.type != "cpu" or not host.is_contiguous():
            host = host.detach().to("cpu", memory_format=torch.contiguous_format).contiguous()
        return host.detach().numpy(), host

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> None:
        if not self.supports_dtype(tensor.dtype):
            raise TypeError(
                f"the mpi backend cannot reduce {tensor.dtype} tensors (numpy/MPI have no such type)"
            )
        array, host = self._host_array(tensor)
        self._comm.Allreduce(self._mpi.IN_PLACE, array, op=self._ops[op])
        if op == "avg":
            host.div_(self.world_size)
        if host is not tensor:
            tensor.copy_(host)

    def all_reduce_async(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> Pending:
        if tensor.device.type != "cpu" or not tensor.is_contiguous() or not self.supports_dtype(tensor.dtype):
            return super().all_reduce_async(tensor, op)
        request = self._comm.Iallreduce(self._mpi.IN_PLACE, tensor.detach().numpy(), op=self._ops[op])
        if op == "avg":
            return Pending(request, lambda: tensor.div_(self.world_size))
        return Pending(request)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        array, host = self._host_array(tensor)
        self._comm.Bcast(array, root=src)
        if host is not tensor:
            tensor.copy_(host)

    def barrier(self) -> None:
        self._comm.Barrier()

    def allgather_object(self, obj: Any) -> list[Any]:
        return list(self._comm.allgather(obj))

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        return self._comm.bcast(obj, root=src)

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        # Half precision has no portable MPI datatype; MLBench also skipped fp16 on MPI.
        return dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8, torch.int8)

    def abort(self, code: int) -> None:
        self._comm.Abort(code)

    def close(self) -> None:
        # Explicit, so the process may end without the interpreter's teardown (mpi4py would
        # otherwise finalize at exit); mpiexec counts a rank that never finalized as failed.
        if not self._mpi.Is_finalized():
            self._mpi.Finalize()

    def version(self) -> str:
        return self._mpi.Get_library_version().strip().splitlines()[0]
