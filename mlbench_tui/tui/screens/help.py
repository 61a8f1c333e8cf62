"""The help screen: every key of every screen, generated from the actions table."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from mlbench_tui.tui.actions import help_rows


def help_table(keymap: dict[str, str]) -> Table:
    table = Table(title="mlbench tui — keys", expand=True, show_lines=False, title_style="bold")
    table.add_column("screen", style="grey62", no_wrap=True)
    table.add_column("key", style="bold cyan", no_wrap=True)
    table.add_column("action", style="bold", no_wrap=True)
    table.add_column("what it does")
    last = None
    for scope, key, description, text in help_rows(keymap):
        table.add_row(scope if scope != last else "", key, description, text)
        last = scope
    table.caption = 'Remap keys in settings.toml under [keymap], e.g. quit = "ctrl+q" or "runs.cancel" = "k".'
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar = [Binding("escape,q,question_mark", "app.pop_screen", "Close", id="help.close")]

    def __init__(self, keymap: dict[str, str]) -> None:
        super().__init__()
        self.keymap = keymap  # action id -> key, after the user's settings

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(help_table(self.keymap), id="help")
