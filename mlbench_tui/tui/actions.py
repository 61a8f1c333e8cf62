"""The one table of TUI actions: id, default key, description, scope.

Everything about keys is generated from ``ACTIONS``: the ``BINDINGS`` of each screen (binding ids
are the action ids, so Textual's keymap can remap them), the help screen, and the command palette
entries. A user remaps keys in ``settings.toml``::

    [keymap]
    quit = "ctrl+q"          # every action named 'quit', in any scope
    "runs.cancel" = "k"      # one action of one screen

Adding an action is one row here plus an ``action_<name>`` method on the screen of its scope.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from textual.binding import Binding, BindingType

SCOPES: dict[str, str] = {
    "app": "Everywhere",
    "runs": "Runs",
    "run": "Run detail",
    "logs": "Run detail: logs",
    "spec": "Specs",
    "compare": "Compare",
    "first": "Getting started",
}


@dataclass(frozen=True)
class Action:
    """One thing a user can do: ``id`` is ``<scope>.<name>``; ``action`` is the Textual action string."""

    id: str
    key: str
    description: str
    help: str
    action: str
    show: bool = True  # shown in the footer

    @property
    def scope(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.id.split(".", 1)[1]


ACTIONS: tuple[Action, ...] = (
    # Everywhere
    Action("app.quit", "q", "Quit", "Leave mlbench tui (runs keep going)", "quit"),
    Action("app.help", "question_mark", "Help", "Show every key of every screen", "app.show_help"),
    Action("app.specs", "S", "Specs", "Browse, validate, preview and launch spec files", "app.open_specs"),
    Action("app.refresh", "ctrl+r", "Refresh", "Fetch everything again now", "app.refresh_now", show=False),
    # Runs
    Action("runs.open", "enter", "Open", "Open the selected run", "open_run"),
    Action(
        "runs.filter", "slash", "Filter", "Filter runs by text (name, task, backend, spec)", "focus_filter"
    ),
    Action(
        "runs.state",
        "s",
        "State",
        "Cycle the state filter: all, running, succeeded, failed, ...",
        "cycle_state",
    ),
    Action("runs.sort", "o", "Sort", "Cycle the sort column", "cycle_sort"),
    Action("runs.reverse", "O", "Reverse", "Reverse the sort order", "reverse_sort", show=False),
    Action("runs.mark", "space", "Mark", "Mark or unmark the selected run for comparison", "toggle_mark"),
    Action("runs.compare", "c", "Compare", "Compare the marked runs (or the selected run's spec)", "compare"),
    Action("runs.cancel", "x", "Cancel", "Cancel the selected run", "cancel_run"),
    Action("runs.delete", "d", "Delete", "Delete the selected run and its data (asks first)", "delete_run"),
    Action("runs.rerun", "r", "Rerun", "Launch the selected run's spec again", "rerun"),
    Action("runs.clear", "escape", "Clear", "Clear the filters and marks", "clear_filters", show=False),
    # Run detail
    Action(
        "run.back",
        "escape",
        "Back",
        "Close the log search (or clear its highlight), else back to the runs",
        "back",
    ),
    Action(
        "run.overview",
        "1",
        "Overview",
        "Spec summary, goal, environment, result",
        "show_tab('overview')",
        show=False,
    ),
    Action(
        "run.ranks",
        "2",
        "Ranks",
        "Ranks across the run: spread, a strip of every rank, the worst first",
        "show_tab('ranks')",
        show=False,
    ),
    Action("run.charts", "3", "Charts", "Live metric charts", "show_tab('charts')", show=False),
    Action("run.logs", "4", "Logs", "All ranks' logs", "show_tab('logs')", show=False),
    Action("run.metrics", "m", "Metrics", "Choose which metrics are charted", "pick_metrics"),
    Action(
        "run.find_ranks",
        "k",
        "Find ranks",
        "Show a rank or a rank set (0-7,512) in the Ranks tab; enter on a row charts its step time",
        "find_ranks",
    ),
    Action("run.cancel", "x", "Cancel", "Cancel this run", "cancel_run"),
    Action("run.rerun", "r", "Rerun", "Launch this run's spec again", "rerun"),
    # Run detail, logs
    Action("logs.search", "slash", "Search", "Highlight a regex in the logs", "search_logs"),
    Action(
        "logs.grep", "g", "Only matches", "Show only lines matching the search", "toggle_grep", show=False
    ),
    Action("logs.next", "n", "Next", "Move to the next line matching the search", "next_match"),
    Action(
        "logs.previous", "N", "Previous", "Move to the previous line matching the search", "previous_match"
    ),
    Action(
        "logs.rank", "right_square_bracket", "Rank", "Cycle the rank filter: all, r0, r1, ...", "cycle_rank"
    ),
    Action(
        "logs.ranks", "R", "Ranks", "Show the logs of a rank set (0-7,512; empty: all ranks)", "filter_ranks"
    ),
    Action("logs.follow", "f", "Follow", "Follow new lines or pause", "toggle_follow"),
    Action("logs.wrap", "w", "Wrap", "Wrap long lines", "toggle_wrap", show=False),
    Action("logs.save", "ctrl+s", "Save", "Save the shown lines to a file", "save_logs", show=False),
    # Specs
    Action("spec.back", "escape", "Back", "Back to the previous screen", "app.pop_screen"),
    Action("spec.open", "o", "Open path", "Open another file or directory of specs", "open_path"),
    Action("spec.reload", "r", "Reload", "Load and validate the selected spec again", "reload"),
    Action("spec.launch", "a", "Apply", "Launch the selected spec's runs (asks first)", "launch"),
    Action(
        "spec.issues", "1", "Issues", "Validation issues with line numbers", "show_tab('issues')", show=False
    ),
    Action("spec.plan", "2", "Plan", "The expanded runs", "show_tab('plan')", show=False),
    Action(
        "spec.dryrun", "3", "Dry run", "The exact commands or manifests", "show_tab('dryrun')", show=False
    ),
    Action("spec.source", "4", "Source", "The spec text", "show_tab('source')", show=False),
    # Compare
    Action("compare.back", "escape", "Back", "Back to the runs table", "app.pop_screen"),
    Action("compare.sort", "o", "Sort", "Cycle the sort column", "cycle_sort"),
    Action(
        "compare.baseline", "b", "Baseline", "Use the selected run as the speedup baseline", "set_baseline"
    ),
    Action("compare.open", "enter", "Open", "Open the selected run", "open_run"),
    Action(
        "compare.report", "R", "Report", "Write the HTML report of the compared runs here", "write_report"
    ),
    # Getting started
    Action("first.quickstart", "a", "Run quick start", "Launch specs/quickstart.yaml", "quickstart"),
)

BY_ID: dict[str, Action] = {a.id: a for a in ACTIONS}


def actions_for(*scopes: str) -> list[Action]:
    """Actions of the given scopes, in table order."""
    return [a for a in ACTIONS if a.scope in scopes]


def bindings(*scopes: str) -> list[BindingType]:
    """Textual bindings for the actions of ``scopes`` (binding id = action id, remappable)."""
    return [
        Binding(a.key, a.action, a.description, show=a.show, id=a.id, tooltip=a.help)
        for a in actions_for(*scopes)
    ]


def resolve_keymap(user: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Turn the settings' ``[keymap]`` into Textual's {binding id: keys}, plus unknown names.

    A key of the user's map is a full id (``runs.cancel``) or a bare name (``cancel``), which
    remaps that action in every scope that has it.
    """
    keymap: dict[str, str] = {}
    unknown: list[str] = []
    for name, keys in user.items():
        if name in BY_ID:
            keymap[name] = keys
            continue
        matches = [a.id for a in ACTIONS if a.name == name]
        if not matches:
            unknown.append(name)
        for action_id in matches:
            keymap.setdefault(action_id, keys)
    # Full ids win over bare names whatever the order in the file.
    for name, keys in user.items():
        if name in BY_ID:
            keymap[name] = keys
    return keymap, unknown


def display_key(keys: str) -> str:
    """How a key string reads in help: ``question_mark`` -> ``?``, ``ctrl+s`` -> ``^s``."""
    names = {
        "question_mark": "?",
        "slash": "/",
        "space": "space",
        "escape": "esc",
        "enter": "enter",
        "left_square_bracket": "[",
        "right_square_bracket": "]",
        "period": ".",
        "comma": ",",
    }
    out = []
    for key in keys.split(","):
        key = key.strip()
        key = names.get(key, key)
        if key.startswith("ctrl+"):
            key = "^" + key[5:]
        out.append(key)
    return "/".join(out)


def effective_key(action: Action, keymap: Mapping[str, str]) -> str:
    return keymap.get(action.id, action.key)


def help_rows(keymap: Mapping[str, str], scopes: Iterable[str] = SCOPES) -> list[tuple[str, str, str, str]]:
    """(scope title, key, description, help) for every action, with the user's keys applied."""
    rows = []
    for scope in scopes:
        for a in actions_for(scope):
            rows.append((SCOPES[scope], display_key(effective_key(a, keymap)), a.description, a.help))
    return rows
