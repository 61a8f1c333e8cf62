"""The actions table drives bindings, help and the command palette; keys remap through settings."""

from __future__ import annotations

from textual.binding import Binding

from mlbench_tui.tui.actions import ACTIONS, SCOPES, bindings, display_key, help_rows, resolve_keymap
from mlbench_tui.tui.app import MlbenchApp
from mlbench_tui.tui.screens.compare import CompareScreen
from mlbench_tui.tui.screens.first_run import FirstRunScreen
from mlbench_tui.tui.screens.run_detail import RunDetailScreen
from mlbench_tui.tui.screens.runs import RunsScreen
from mlbench_tui.tui.screens.spec import SpecScreen

SCREEN_FOR_SCOPE = {
    "app": MlbenchApp,
    "runs": RunsScreen,
    "run": RunDetailScreen,
    "logs": RunDetailScreen,
    "spec": SpecScreen,
    "compare": CompareScreen,
    "first": FirstRunScreen,
}


def test_every_action_has_a_handler_on_its_screen() -> None:
    for action in ACTIONS:
        name = action.action.split("(")[0]
        if name.startswith("app."):
            owner: type = MlbenchApp
            name = name.removeprefix("app.")
        else:
            owner = SCREEN_FOR_SCOPE[action.scope]
        assert callable(getattr(owner, f"action_{name}", None)), (
            f"{action.id}: {owner.__name__}.action_{name}"
        )


def test_ids_unique_and_keys_unique_per_screen() -> None:
    assert len({a.id for a in ACTIONS}) == len(ACTIONS)
    for scope in SCOPES:
        screen_scopes = {"run": ("run", "logs"), "logs": ("run", "logs")}.get(scope, (scope,))
        keys = [a.key for a in ACTIONS if a.scope in (*screen_scopes, "app")]
        assert len(keys) == len(set(keys)), f"duplicate key in {scope}: {sorted(keys)}"


def test_bindings_carry_the_action_ids() -> None:
    generated = [b for b in bindings("runs") if isinstance(b, Binding)]
    assert {b.id for b in generated} == {a.id for a in ACTIONS if a.scope == "runs"}
    assert bindings("runs") == RunsScreen.BINDINGS


def test_keymap_bare_names_and_full_ids() -> None:
    keymap, unknown = resolve_keymap({"cancel": "k", "runs.cancel": "ctrl+k", "quit": "ctrl+q", "nope": "z"})
    assert keymap["runs.cancel"] == "ctrl+k"  # the full id wins over the bare name
    assert keymap["run.cancel"] == "k"
    assert keymap["app.quit"] == "ctrl+q"
    assert unknown == ["nope"]


def test_help_rows_cover_every_action_with_remapped_keys() -> None:
    rows = help_rows({"app.quit": "ctrl+q"})
    assert len(rows) == len(ACTIONS)
    assert ("Everywhere", "^q", "Quit", "Leave mlbench tui (runs keep going)") in rows
    assert display_key("question_mark") == "?"
