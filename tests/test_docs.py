"""``docs/`` is the reference generated from the spec's schema and the task catalog, never edited by
hand: it matches what ``mlbench docs`` writes, documents every field and every task, and the
terminal prints the same text (``mlbench explain FIELD``, ``mlbench tasks TASK``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from mlbench_tui.commands.data import DESCRIPTIONS
from mlbench_tui.reference.fields import spec_fields
from mlbench_tui.reference.pages import differences, reference_pages
from mlbench_tui.spec.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def mlbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_docs_are_what_mlbench_docs_writes() -> None:
    stale = differences(DOCS, reference_pages(DESCRIPTIONS))
    assert not stale, f"docs/ is out of date ({', '.join(stale)}): regenerate it with ./dev docs"
    check = mlbench("docs", "--check")
    assert check.returncode == 0, check.stderr


def test_every_field_has_its_type_default_bounds_targets_and_an_example() -> None:
    page = (DOCS / "spec.md").read_text()
    sections = {block.split("\n", 1)[0]: block for block in re.split(r"\n(?=#{2,3} )", page)}
    fields = spec_fields()
    assert len(fields) > 50
    for field in fields:
        heading = next((h for h in sections if h.lstrip("# ") == field.heading), None)
        assert heading is not None, f"no section for {field.heading}"
        body = sections[heading]
        for line in ("- type: ", "- default: ", "- bounds: ", "- targets: "):
            assert line in body, f"{field.heading}: no '{line.strip()}'"
        if not field.children:
            assert "```yaml\n" in body, f"{field.heading}: no example"
    workers = sections["### spec.workers"]
    assert "- type: an integer, or a list of integers" in workers and "1 to 4096" in workers
    assert "- default: `[1]`" in workers  # what a spec that leaves it out gets
    memory = sections["### spec.hardware.memory"]
    assert "local (recorded, not enforced)" in memory and "slurm (--mem-per-cpu" in memory
    namespace = sections["### spec.target.namespace (kubernetes target)"]
    assert "- targets: kubernetes\n" in namespace and "kind: kubernetes\n" in namespace


def test_every_task_has_a_page_with_goals_data_hyperparameters_and_baselines() -> None:
    for task in TASKS.values():
        page = (DOCS / "tasks" / f"{task.id}.md").read_text()
        for heading in (
            "## Goal",
            "## Dataset",
            "## How it runs",
            "## Hyperparameters",
            "## MLBench's published results",
        ):
            assert heading in page, (task.id, heading)
        for name in task.defaults:
            assert f"| `{name}` |" in page, (task.id, name)
    one_a = (DOCS / "tasks" / "1a.md").read_text()
    assert "`mlbench data prepare cifar10`" in one_a and "407 s to Prec@1 80" in one_a
    assert "| `momentum` | `0.9` | fixed (the official value) |" in one_a
    zero_a = (DOCS / "tasks" / "0a.md").read_text()
    assert "hyperparameters.dtypes: fp32, fp16" in zero_a  # what it measures, beside hardware.precision
    index = (DOCS / "tasks" / "README.md").read_text()
    assert all(f"[{t.id}]({t.id}.md)" in index for t in TASKS.values())


def test_the_terminal_prints_the_same_text() -> None:
    one_a = mlbench("tasks", "1a")
    assert one_a.returncode == 0 and one_a.stdout == (DOCS / "tasks" / "1a.md").read_text()
    gpu = mlbench("explain", "hardware.gpu")
    assert gpu.returncode == 0 and gpu.stdout.startswith("### spec.hardware.gpu\n")
    assert gpu.stdout.strip() in (DOCS / "spec.md").read_text()  # the page's sections, verbatim
    assert "### spec.hardware.gpu.strict" in gpu.stdout  # a section brings its fields
    names = mlbench("explain")
    assert "spec.hardware.gpu\n" in names.stdout
    wrong = mlbench("explain", "wokers")
    assert wrong.returncode == 2 and "did you mean 'workers'?" in wrong.stderr


def test_the_readme_points_into_the_reference() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "docs/spec.md" in readme and "docs/tasks/" in readme
