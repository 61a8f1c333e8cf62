"""The NVIDIA GPUs this machine shows a local run, counted without importing torch or CUDA.

The driver is asked first through ``nvidia-smi -L`` (what a container was given, with UUIDs),
else read from ``/proc/driver/nvidia/gpus`` (one directory per GPU, its UUID in ``information``).
``CUDA_VISIBLE_DEVICES`` then narrows the set as CUDA does: entries are indices or UUID prefixes
(``GPU-...``, ``MIG-...``), read up to the first that names no device, an empty value hides every
GPU. Both sources are parameters so a test can point them at a fake command or directory.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

NVIDIA_SMI = "nvidia-smi"
PROC_GPUS = Path("/proc/driver/nvidia/gpus")
_SMI_LINE = re.compile(r"^GPU (\d+): .*\(UUID: (GPU-[0-9A-Za-z-]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG .*\(UUID: (MIG-[0-9A-Za-z/-]+)\)\s*$")
_UUID_LINE = re.compile(r"^GPU UUID:\s*(\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class MachineGpus:
    """The GPUs the driver lists (UUIDs in index order), where that came from, and how many a
    process with ``visible_devices`` as its ``CUDA_VISIBLE_DEVICES`` sees."""

    uuids: tuple[str, ...]
    source: str
    visible_devices: str | None = None
    mig: tuple[str, ...] = ()

    @property
    def visible(self) -> int:
        """How many GPUs CUDA enumerates under ``CUDA_VISIBLE_DEVICES``."""
        if self.visible_devices is None:
            return len(self.uuids)
        seen: list[str] = []
        for item in (part.strip() for part in self.visible_devices.split(",")):
            found = self._device(item)
            if found is None or found in seen:
                break
            seen.append(found)
        return len(seen)

    def _device(self, item: str) -> str | None:
        if re.fullmatch(r"\d+", item):
            index = int(item)
            return self.uuids[index] if index < len(self.uuids) else None
        if item.startswith(("GPU-", "MIG-")) and len(item) > 4:
            return next((uuid for uuid in (*self.uuids, *self.mig) if uuid.startswith(item)), None)
        return None

    def describe(self) -> str:
        """``'1 GPU (CUDA_VISIBLE_DEVICES=0 of 8 found by nvidia-smi -L)'`` and the like."""
        count = self.visible
        shown = f"{count} GPU{'' if count == 1 else 's'}" if count else "no GPU"
        if self.visible_devices is None:
            return f"{shown} ({self.source})"
        return f"{shown} (CUDA_VISIBLE_DEVICES={self.visible_devices!r} of {len(self.uuids)} {self.source})"


def _from_smi(smi: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """GPU and MIG UUIDs from ``nvidia-smi -L``; None when it cannot run or reach the driver."""
    try:
        out = subprocess.run(
            [smi, "-L"], capture_output=True, text=True, timeout=30, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    gpus: dict[int, str] = {}
    mig: list[str] = []
    for line in out.stdout.splitlines():
        if match := _SMI_LINE.match(line):
            gpus[int(match[1])] = match[2]
        elif match := _MIG_LINE.match(line):
            mig.append(match[1])
    return tuple(gpus[i] for i in sorted(gpus)), tuple(mig)


def _from_proc(proc_dir: Path) -> tuple[str, ...] | None:
    """UUIDs from the driver's ``/proc`` directories (PCI bus order, as CUDA's default order
    mostly is); None when the directory does not exist."""
    try:
        entries = sorted(p for p in proc_dir.iterdir() if p.is_dir())
    except OSError:
        return None
    uuids = []
    for entry in entries:
        try:
            match = _UUID_LINE.search((entry / "information").read_text(errors="replace"))
        except OSError:
            match = None
        uuids.append(match[1] if match else f"GPU-unknown-{entry.name}")
    return tuple(uuids)


def machine_gpus(
    env: Mapping[str, str] | None = None, *, smi: str | None = None, proc_dir: Path = PROC_GPUS
) -> MachineGpus:
    """The GPUs a local run started with ``env`` (default: this process's) would see.

    ``smi`` is the ``nvidia-smi`` to run (default: the one on ``env``'s PATH).
    """
    env = os.environ if env is None else env
    visible_devices = env.get("CUDA_VISIBLE_DEVICES")
    command = smi or shutil.which(NVIDIA_SMI, path=env.get("PATH"))
    if command is not None:
        listed = _from_smi(command)
        if listed is not None:
            return MachineGpus(listed[0], "found by nvidia-smi -L", visible_devices, listed[1])
    found = _from_proc(proc_dir)
    if found is not None:
        return MachineGpus(found, f"found in {proc_dir}", visible_devices)
    why = "nvidia-smi failed" if command is not None else "no nvidia-smi on PATH"
    return MachineGpus((), f"no NVIDIA driver: {why}, no {proc_dir}", visible_devices)
