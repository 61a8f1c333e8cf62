"""``MlbenchApp``: the Textual application behind ``mlbench tui``.

The app decides which screens there are and how they open (the runs table first, help, the spec
browser); what the screens share (the server's client, connection state, keymap, command palette,
error handling) is its base, ``Shell``, which the screens import instead of this module. Screens
own their data; their feeds run in thread workers (see ``feed.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from mlbench_tui.tui.actions import BY_ID, bindings
from mlbench_tui.tui.shell import Shell


class MlbenchApp(Shell):
    """Runs table, run detail, specs, compare and help screens over one mlbench server."""

    CSS_PATH = Path(__file__).with_name("mlbench.tcss")
    TITLE = "mlbench"
    BINDINGS: ClassVar = bindings("app")
    ENABLE_COMMAND_PALETTE = True

    def on_mount(self) -> None:
        from mlbench_tui.tui.screens.runs import RunsScreen

        self.set_keymap(self.resolved_keymap)
        if self.unknown_keys:
            known = ", ".join(sorted({a.name for a in BY_ID.values()}))
            self.notify(
                f"settings [keymap]: unknown action(s) {', '.join(self.unknown_keys)}; known: {known}",
                severity="warning",
                timeout=10,
            )
        self.push_screen(RunsScreen())

    def action_show_help(self) -> None:
        from mlbench_tui.tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.resolved_keymap))

    def action_open_specs(self) -> None:
        from mlbench_tui.tui.screens.spec import SpecScreen

        if not isinstance(self.screen, SpecScreen):
            self.push_screen(SpecScreen(self.spec_path or Path.cwd()))
