"""`mlbench --help`, `validate`, `plan` and `apply --dry-run` stay light: no torch, textual, kubernetes,
pulumi, sqlmodel, matplotlib (only `mlbench report` draws).

Each command runs in a fresh interpreter, which then reports which heavy packages got imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("torch", "textual", "kubernetes", "pulumi", "sqlmodel", "matplotlib")

_PROBE = """
import json, sys
from mlbench_tui.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(json.loads(%r)))
sys.stderr.write('\\nHEAVY=' + json.dumps(heavy) + '\\n')
raise SystemExit(code)
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["validate", "specs/quickstart.yaml"],
        ["validate", "specs"],
        ["plan", "specs/quickstart.yaml", "-o", "json"],
        ["plan", "specs/smoke-kind.yaml", "-o", "yaml"],
        ["apply", "--dry-run", "specs/quickstart.yaml"],
        ["report", "--help"],
    ],
    ids=[
        "help",
        "validate",
        "validate-dir",
        "plan-json",
        "plan-yaml-kubernetes",
        "apply-dry-run",
        "report-help",
    ],
)
def test_light_commands_import_no_heavy_package(argv: list[str]) -> None:
    probe = _PROBE % json.dumps(FORBIDDEN)
    proc = subprocess.run(
        [sys.executable, "-c", probe, *argv], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("HEAVY=")][-1]
    assert json.loads(line[len("HEAVY=") :]) == []


def test_spec_package_imports_only_pydantic_ruamel_and_stdlib() -> None:
    """...and of the worker runtime only its stdlib-only wire (the defaults and config it shares)."""
    code = (
        "import sys; import mlbench_tui.spec.loader, mlbench_tui.plan, mlbench_tui.settings; "
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules}))); "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('mlbench_worker'))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    roots_line, worker_line = proc.stdout.splitlines()
    roots = set(roots_line.split())
    # the worker's stdlib-only wire (and how it declares messages), the hyperparameter
    # declarations it shares with the engine and the rank's environment (the names a spec's env
    # may not set, and the parsers of the variables it may), each task's data options
    assert set(worker_line.split()) == {
        "mlbench_worker",
        "mlbench_worker.wire",
        "mlbench_worker.config",
        "mlbench_worker.preflight_config",
        "mlbench_worker.wire_types",
        "mlbench_worker.hyperparams",
        "mlbench_worker.hyperparams_base",
        "mlbench_worker.knobs",
        "mlbench_worker.rank_env",
        "mlbench_worker.env_settings",
        "mlbench_worker.data",  # an empty package: its stdlib-only options below
        "mlbench_worker.data.options",
    }
    # private roots are interpreter/installer plumbing (editable finder, sysconfig data)
    ours = {"mlbench_tui", "mlbench_worker"}
    third_party = {r for r in roots - set(sys.stdlib_module_names) if not r.startswith("_")} - ours
    allowed = {
        "pydantic",
        "pydantic_core",
        "ruamel",
        "typing_extensions",
        "annotated_types",
        "typing_inspection",
        "platformdirs",
    }
    assert third_party <= allowed, third_party - allowed


# What the TUI may import of the engine (the contract "tui-over-http" in pyproject.toml forbids
# the rest): the wire models and read protocol, the server's client, and what computes locally.
TUI_MAY_IMPORT = (
    "mlbench_tui.store.api_models",
    "mlbench_tui.store.wire_models",
    "mlbench_tui.store.read_api",
    "mlbench_tui.server.client",
    "mlbench_tui.server.paging",
    "mlbench_tui.server.records",
    "mlbench_tui.owners",
    "mlbench_tui.spec",
    "mlbench_tui.plan",
    "mlbench_tui.results",
    "mlbench_tui.report",
    "mlbench_tui.formatting",
    "mlbench_tui.settings",
    "mlbench_tui.errors",
    "mlbench_tui.lifecycle",
    "mlbench_tui.ranksets",
)
PACKAGE_INITS = ("mlbench_tui", "mlbench_tui.__main__", "mlbench_tui.store", "mlbench_tui.server")


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_every_engine_module_is_allowed_to_the_tui_or_forbidden_by_its_contract() -> None:
    """A new engine module is placed on one side of "the TUI talks to the engine only over HTTP"."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}
    forbidden = tuple(contracts["tui-over-http"]["forbidden_modules"])
    modules = []
    for path in sorted((ROOT / "mlbench_tui").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    engine = [m for m in modules if not _within(m, ("mlbench_tui.tui",)) and m not in PACKAGE_INITS]
    unplaced = [m for m in engine if not _within(m, TUI_MAY_IMPORT) and not _within(m, forbidden)]
    assert unplaced == [], f"add these to tui-over-http's forbidden_modules or to TUI_MAY_IMPORT: {unplaced}"
    assert [m for m in engine if _within(m, TUI_MAY_IMPORT) and _within(m, forbidden)] == []
