"""The spec screen: browse spec files, see validation issues by line, the plan, the dry run; launch.

Loading and planning use the pure spec layer and ``plan.expand`` in a thread worker (they read
local files, not the store). The dry run and the launch run the CLI (``mlbench apply --dry-run``,
``mlbench apply --detach``) so the TUI shows and does exactly what the command line would.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.syntax import Syntax
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, DirectoryTree, Footer, Input, Static, TabbedContent, TabPane
from textual.widgets.data_table import CellDoesNotExist

from mlbench_tui.errors import SpecIssue
from mlbench_tui.tui.actions import bindings
from mlbench_tui.tui.goal import goal_label
from mlbench_tui.tui.screens import run_commands
from mlbench_tui.tui.screens.launch import LaunchPreview, LaunchScreen, preview
from mlbench_tui.tui.shell import Shell, shell_of
from mlbench_tui.tui.widgets.banner import ConnectionBanner
from mlbench_tui.tui.widgets.table import FittedTable

if TYPE_CHECKING:
    from mlbench_tui.plan import RunPlan

YAML_SUFFIXES = (".yaml", ".yml")
ISSUE_COLUMNS = (("file", 18), ("line", 4), ("col", 3), ("problem", 44), ("hint", 30))


@dataclass
class SpecReport:
    """What loading one path produced: issues, plans, source text."""

    path: Path
    issues: list[SpecIssue] = field(default_factory=list)
    plans: list[RunPlan] = field(default_factory=list)
    text: str = ""
    error: str | None = None


def load_report(path: Path) -> SpecReport:
    """Validate ``path`` (file or directory) and expand its plans; never raises."""
    from mlbench_tui.errors import MlbenchError
    from mlbench_tui.plan import expand
    from mlbench_tui.spec.loader import collect_paths

    report = SpecReport(path)
    try:
        if path.is_file():
            report.text = path.read_text(encoding="utf-8", errors="replace")
        loaded, issues = collect_paths([path])
        report.issues = list(issues)
        for spec in loaded:
            try:
                report.plans.extend(expand(spec.spec))
            except MlbenchError as exc:
                report.error = exc.render()
    except MlbenchError as exc:
        report.error = exc.render()
    except OSError as exc:
        report.error = f"cannot read {path}: {exc}"
    return report


SEARCH_DEPTH = 4  # how deep a folder is searched for a spec before the tree leaves it out
SEARCH_ENTRIES = 5000  # entries looked at per folder at most (a huge tree is shown, not walked)


def holds_specs(folder: Path, depth: int = SEARCH_DEPTH) -> bool:
    """Whether ``folder`` has a YAML file within ``depth`` levels (hidden folders skipped); a folder
    too big to search is assumed to."""
    seen = 0
    pending = [(folder, 0)]
    while pending:
        current, level = pending.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > SEARCH_ENTRIES:
                return True
            if entry.name.startswith("."):
                continue
            if entry.is_file() and entry.name.endswith(YAML_SUFFIXES):
                return True
            if entry.is_dir(follow_symlinks=False) and level + 1 < depth:
                pending.append((Path(entry.path), level + 1))
    return False


class SpecTree(DirectoryTree):
    """A directory tree of spec files: YAML files, and only the folders that hold some."""

    def filter_paths(self, paths: Iterable[Path]) -> Iterable[Path]:
        shown = []
        for path in paths:
            if path.name.startswith("."):
                continue
            if (path.is_dir() and holds_specs(path)) or (path.is_file() and path.suffix in YAML_SUFFIXES):
                shown.append(path)
        return shown


class SpecScreen(Screen[None]):
    """Spec browser with issues, plan, dry run and source tabs."""

    SCOPES: ClassVar[tuple[str, ...]] = ("spec",)
    BINDINGS: ClassVar = bindings("spec")

    def __init__(self, path: Path) -> None:
        super().__init__()
        path = path.expanduser()
        self.root = path if path.is_dir() else path.parent
        self.selected: Path | None = path if path.is_file() else None
        self.report: SpecReport | None = None
        self.refusal: tuple[Path, str | None] | None = None  # what apply --dry-run said of a path
        self.preview: LaunchPreview | None = None

    @property
    def mlbench(self) -> Shell:
        return shell_of(self)

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield ConnectionBanner(id="banner")
        yield Input(placeholder="open a spec file or directory (enter)", id="spec-path")
        with Horizontal(id="spec-body"):
            yield SpecTree(self.root, id="spec-tree")
            with TabbedContent(id="spec-tabs", initial="issues"):
                with TabPane("Issues [1]", id="issues"):
                    yield Static(id="spec-verdict")
                    yield FittedTable(cursor_type="row", id="issue-table")
                with TabPane("Plan [2]", id="plan"):
                    yield FittedTable(cursor_type="row", id="plan-table")
                with TabPane("Dry run [3]", id="dryrun"), VerticalScroll():
                    yield Static(id="dryrun-text")
                with TabPane("Source [4]", id="source"), VerticalScroll():
                    yield Static(id="source-text")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#spec-path", Input).display = False
        issues = self.query_one("#issue-table", DataTable)
        for column, width in ISSUE_COLUMNS:  # the problem and its hint wrap, never cut
            issues.add_column(column, key=column, width=width)
        plans = self.query_one("#plan-table", DataTable)
        for column in (
            "run",
            "apply",
            "task",
            "backend",
            "workers",
            "repeat",
            "goal",
            "threads",
            "data",
            "hyperparameters",
        ):
            plans.add_column(column, key=column)
        self._title()
        self.query_one(SpecTree).focus()
        if self.selected is not None:
            self._load(self.selected)

    def _title(self) -> None:
        title = Text.assemble((" mlbench ", "bold reverse"), "  specs ", (str(self.root), "grey50"))
        if self.selected is not None:
            title.append(f"   {self.selected}", style="bold")
        self.query_one("#title", Static).update(title)

    # -- loading ----------------------------------------------------------------------------
    @on(DirectoryTree.FileSelected)
    def _file_selected(self, event: DirectoryTree.FileSelected) -> None:
        self._load(Path(event.path))

    def _load(self, path: Path) -> None:
        self.selected = path
        self.refusal = None
        self.preview = None
        self._title()
        self.query_one("#spec-verdict", Static).update(Text("validating…", style="grey50"))
        self._validate(path)
        self.query_one("#dryrun-text", Static).update(
            Text("running mlbench apply --dry-run …", style="grey50")
        )
        self._dry_run(path)

    @work(thread=True, exclusive=True, group="spec-load", exit_on_error=False)
    def _validate(self, path: Path) -> None:
        report = load_report(path)
        self.app.call_from_thread(self._show_report, report)

    @work(thread=True, exclusive=True, group="spec-dryrun", exit_on_error=False)
    def _dry_run(self, path: Path) -> None:
        from mlbench_tui.tui.launcher import LaunchError

        refused: str | None = None
        try:
            result = self.mlbench.launcher.run("apply", str(path), "--dry-run")
            text = Text(result.stdout + (result.stderr if result.stderr.strip() else ""))
        except LaunchError as exc:
            refused = exc.message.removeprefix("error: ").replace("\nhint: ", " (hint: ") + (
                ")" if "\nhint: " in exc.message else ""
            )
            text = Text(f"mlbench apply --dry-run failed:\n{exc.message}", style="red")
        self.app.call_from_thread(self.query_one("#dryrun-text", Static).update, text)
        self.app.call_from_thread(self._dry_run_done, path, refused)

    def _dry_run_done(self, path: Path, refused: str | None) -> None:
        if path != self.selected:
            return
        self.refusal = (path, refused)
        self._preview()

    def _preview(self) -> None:
        """Once both the spec's plans and the dry run are in: what apply would do, from the store."""
        report, refusal = self.report, self.refusal
        if report is None or refusal is None or report.path != refusal[0] or report.issues or report.error:
            return
        self._read_preview(report, refusal[1])

    @work(thread=True, exclusive=True, group="spec-preview", exit_on_error=False)
    def _read_preview(self, report: SpecReport, refused: str | None) -> None:
        from mlbench_tui.errors import MlbenchError

        names = {plan.spec_name for plan in report.plans}
        try:
            runs = [run for name in sorted(names) for run in self.mlbench.client.list_runs(spec_name=name)]
        except MlbenchError:
            runs = []  # no server: apply would start them all (and says so itself)
        plans = [(plan.name, plan.spec_hash) for plan in report.plans]
        self.app.call_from_thread(self._show_preview, report.path, preview(plans, runs, refused))

    def _show_preview(self, path: Path, found: LaunchPreview) -> None:
        if path != self.selected or self.report is None:
            return
        self.preview = found
        self._verdict(self.report)
        plans = self.query_one("#plan-table", DataTable)
        for plan in self.report.plans:
            with contextlib.suppress(CellDoesNotExist):
                plans.update_cell(plan.name, "apply", found.action(plan.name))

    def _show_report(self, report: SpecReport) -> None:
        if report.path != self.selected:
            return  # a newer selection is loading
        self.report = report
        self._verdict(report)
        issues = self.query_one("#issue-table", DataTable)
        issues.clear()
        for i, issue in enumerate(report.issues):
            issues.add_row(
                Path(issue.file).name,
                str(issue.line),
                str(issue.col),
                Text(issue.message, overflow="fold"),
                Text(issue.hint or "", overflow="fold"),
                key=str(i),
                height=None,
            )
        plans = self.query_one("#plan-table", DataTable)
        plans.clear()
        for plan in report.plans:
            plans.add_row(
                plan.name,
                "checking…",
                f"{plan.task} {plan.task_name}",
                plan.backend,
                str(plan.workers),
                f"{plan.repeat + 1}/{plan.repeats}",
                goal_label(plan.goal),
                str(plan.resources.threads_per_rank),
                plan.data.source,
                ", ".join(f"{k}={v}" for k, v in sorted(plan.hyperparameters.items()))[:200],
                key=plan.name,
            )
        source = self.query_one("#source-text", Static)
        if report.text:
            lines = {i.line for i in report.issues if Path(i.file).resolve() == report.path.resolve()}
            syntax = Syntax(report.text, "yaml", line_numbers=True, highlight_lines=lines, word_wrap=True)
            source.update(syntax)
        else:
            source.update(
                Text(f"{report.path} is a directory: select a file to see its source", style="grey50")
            )
        if report.issues:
            self.query_one("#spec-tabs", TabbedContent).active = "issues"
        self._preview()

    def _verdict(self, report: SpecReport) -> None:
        """The line above the issues: what is wrong, or what launching would do."""
        verdict = Text()
        key = self.mlbench.key_for("spec.launch")
        found = self.preview
        if report.error:
            verdict.append(report.error, style="bold red")
        elif report.issues:
            verdict.append(f"✘ {len(report.issues)} problem(s): fix them before launching", style="bold red")
        elif found is None:
            verdict.append(f"✔ valid: {len(report.plans)} run(s) planned", style="bold green")
            verdict.append("   checking what apply would do on this machine…", style="grey50")
        elif found.outcome == "refuse":
            verdict.append("✔ valid, but apply refuses it here: ", style="bold yellow")
            verdict.append(str(found.refused), style="yellow")
        else:
            verdict.append(f"✔ valid: {found.summary()}", style="bold green")
            verdict.append(f"   press {key} to launch", style="grey50")
        self.query_one("#spec-verdict", Static).update(verdict)

    # -- actions ----------------------------------------------------------------------------
    def action_show_tab(self, tab: str) -> None:
        self.query_one("#spec-tabs", TabbedContent).active = tab

    def action_reload(self) -> None:
        if self.selected is not None:
            self._load(self.selected)

    def action_open_path(self) -> None:
        box = self.query_one("#spec-path", Input)
        box.display = True
        box.value = str(self.selected or self.root)
        box.focus()

    @on(Input.Submitted, "#spec-path")
    def _path_entered(self, event: Input.Submitted) -> None:
        path = Path(event.value).expanduser()
        event.input.display = False
        if not path.exists():
            self.notify(f"{path} does not exist", severity="error")
            return
        if path.is_dir():
            self.root = path
            self.query_one(SpecTree).path = path
            self.selected = None
            self._title()
        else:
            if path.parent != self.root:
                self.root = path.parent
                self.query_one(SpecTree).path = path.parent
            self._load(path)
        self.query_one(SpecTree).focus()

    def action_launch(self) -> None:
        path = self.selected
        if path is None:
            self.notify("select a spec file (or open a directory) first", severity="warning")
            return
        report = self.report
        if report is None or report.path != path:
            self.notify("still validating…", severity="warning")
            return
        if report.issues or report.error:
            self.notify("the spec has problems: fix them first (see Issues)", severity="error")
            self.action_show_tab("issues")
            return
        if self.preview is None:
            self.notify("still checking what apply would do…", severity="warning")
            return

        def answer(choice: str | None) -> None:
            if choice is not None:
                run_commands.launch(self.mlbench, path, force=choice == "force")

        self.app.push_screen(LaunchScreen(path.name, self.preview), answer)
