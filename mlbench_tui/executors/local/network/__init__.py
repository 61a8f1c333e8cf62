"""The network dimension on this machine (spec.network on local runs): emulated nodes (network
namespaces), their veth links through a bridge, and tc shaping on each link.

``layout`` plans a run's names, addresses and commands (pure); ``links`` applies and removes them
with ``ip``/``tc`` and checks the shaping held; ``ledger`` records every network before it exists,
hands out subnets and removes what killed runs left; ``probe`` says what this machine can emulate;
``runs`` ties them to a run plan for the local executor.
"""

from __future__ import annotations

from pathlib import Path

LEDGER_DIR = ".network"
"""Under the runs directory: one record per run's network (``ledger``); none, nothing to clean."""


def remove_leftovers(runs_dir: Path | None = None) -> list[str]:
    """Remove the emulated networks that killed runs left under ``runs_dir`` (the settings' by
    default): a note per run, never an exception. A glance at one directory when nothing was left,
    so every command that reaches the store can afford it."""
    if runs_dir is None:
        from mlbench_tui.settings import load_settings

        runs_dir = load_settings().runs_dir
    if not any((runs_dir / LEDGER_DIR).glob("*.json")):
        return []
    from mlbench_tui.errors import ExecutorError
    from mlbench_tui.executors.local.network import ledger

    try:
        return ledger.sweep(runs_dir)
    except (OSError, ExecutorError) as exc:
        return [f"could not look for emulated networks left by killed runs: {exc}"]
