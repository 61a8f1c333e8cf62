"""``Shell``: what every screen of ``mlbench tui`` shares, below the screens themselves.

The shell owns the one HTTP client of the server, the connection state (the banner binds to it),
the keymap, the clock, the launcher of CLI commands, the command palette and the one handler of
worker errors. Screens reach it through ``shell_of`` (typed, without importing the application
that opens them: ``tui.app`` decides which screens exist and imports them; they import this).
Everything reaches the engine through the HTTP API, except launching and cancelling, which run
the ``mlbench`` CLI as a subprocess (``launcher.py``).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

from textual.app import App, SystemCommand
from textual.dom import DOMNode
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.theme import Theme
from textual.worker import Worker, WorkerState

from mlbench_tui.errors import MlbenchError
from mlbench_tui.server.client import Attachment, MlbenchClient
from mlbench_tui.tui.actions import BY_ID, actions_for, display_key, resolve_keymap
from mlbench_tui.tui.launcher import Launcher
from mlbench_tui.tui.messages import CommandFinished, ConnectionChanged


class Shell(App[None]):
    """The application's shared state and handlers over one mlbench server (see the module doc)."""

    connected: reactive[bool] = reactive(True)
    connection_detail: reactive[str] = reactive("")

    def __init__(
        self,
        server_url: str,
        *,
        token: str | None = None,
        admin_token: str | None = None,
        keymap: dict[str, str] | None = None,
        spec_path: Path | None = None,
        clock: Callable[[], float] = time.time,
        runs_interval: float = 1.0,
        update_interval: float = 0.25,
        launcher: Launcher | None = None,
        error_log: Path | None = None,
        timeout: float = 5.0,
        reattach: Callable[[], Attachment] | None = None,
    ) -> None:
        self._theme_copy: dict[str, Theme] | None = None  # get_theme's copy of available_themes
        super().__init__()
        self.server_url = server_url.rstrip("/")
        # The one client of the server for every feed, screen and command: the admin token when
        # the TUI has it (it deletes runs), else the read token.
        # ``reattach`` finds the store's server again when it went away (a local store's server).
        self.client = MlbenchClient(self.server_url, admin_token or token, timeout=timeout, reattach=reattach)
        self.user_keymap = dict(keymap or {})
        self.spec_path = spec_path
        self.clock = clock
        self.runs_interval = runs_interval
        self.update_interval = update_interval
        self.launcher = launcher or Launcher(self.server_url, admin_token or token)
        self.error_log = error_log
        self.resolved_keymap, self.unknown_keys = resolve_keymap(self.user_keymap)
        self.first_paint: float | None = None  # wall time the runs table was first painted with data

    def on_unmount(self) -> None:
        self.client.close()

    def get_theme(self, theme_name: str) -> Theme | None:
        """Textual's lookup over one copy of ``available_themes`` instead of a copy per call: it
        runs for every rendered line (through ``ansi_theme``). Registering or unregistering a
        theme drops the copy."""
        if self._theme_copy is None:
            self._theme_copy = self.available_themes
        theme = self._theme_copy.get(theme_name)
        return theme if theme is not None else super().get_theme(theme_name)

    def register_theme(self, theme: Theme) -> None:
        super().register_theme(theme)
        self._theme_copy = None

    def unregister_theme(self, theme_name: str) -> None:
        super().unregister_theme(theme_name)
        self._theme_copy = None

    # -- connection state -------------------------------------------------------------------
    def on_connection_changed(self, message: ConnectionChanged) -> None:
        if message.connected:
            if not self.connected:
                self.notify("reconnected to the server", timeout=3)
            self.connected = True
            self.connection_detail = ""
        else:
            retry = f" (retry in {message.retry_in:g}s)" if message.retry_in else ""
            self.connection_detail = f"{message.detail}{retry}"
            self.connected = False

    def post_status(self, message: Message) -> None:
        """Thread-safe: feeds call this to report the connection state to the app."""
        self.post_message(message)

    def on_command_finished(self, message: CommandFinished) -> None:
        if message.error:
            self.notify(f"{message.what}: {message.error}", severity="error", timeout=8)
        else:
            self.notify(message.message, timeout=4)

    # -- shared actions ---------------------------------------------------------------------
    def action_refresh_now(self) -> None:
        for screen in self.screen_stack:
            refresh = getattr(screen, "refresh_data", None)
            if callable(refresh):
                refresh()

    def key_for(self, action_id: str) -> str:
        """The key (as shown to users) bound to ``action_id`` after the user's keymap."""
        action = BY_ID[action_id]
        return display_key(self.resolved_keymap.get(action_id, action.key))

    # -- command palette --------------------------------------------------------------------
    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """One palette entry per action available on ``screen`` (from the actions table)."""
        scopes = ("app", *getattr(screen, "SCOPES", ()))
        seen: set[str] = set()
        for action in actions_for(*scopes):
            target = self if action.scope == "app" or action.action.startswith("app.") else screen
            name = action.action.removeprefix("app.")
            seen.add(action.description)
            yield SystemCommand(
                f"{action.description} ({action.scope})" if action.scope != "app" else action.description,
                f"{action.help}  [key: {self.key_for(action.id)}]",
                partial(target.run_action, name),
            )
        for command in super().get_system_commands(screen):
            if command.title not in seen and command.title not in ("Quit", "Keys"):
                yield command

    # -- errors -----------------------------------------------------------------------------
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one handler of worker errors (Harlequin's pattern): every feed, read and command
        runs in a worker with ``exit_on_error=False``, and what one raises ends here. A failure
        the user can act on (server unreachable, run gone) is a notification; anything else is
        a bug: its traceback goes to the error log as well."""
        worker = event.worker
        if event.state is not WorkerState.ERROR or worker.error is None:
            return
        what = worker.name or worker.group
        if isinstance(worker.error, MlbenchError):
            self.notify(f"{what}: {worker.error.message}", severity="error", timeout=8)
        else:
            self.report_error(what, worker.error)

    def report_error(self, what: str, error: BaseException) -> None:
        """Keep running, say so once, log the traceback."""
        self._log_traceback(error)
        where = f" (details in {self.error_log})" if self.error_log is not None else ""
        self.notify(f"{what}: {type(error).__name__}: {error}{where}", severity="error", timeout=8)

    def _log_traceback(self, error: BaseException) -> bool:
        if self.error_log is None:
            return False
        try:
            self.error_log.parent.mkdir(parents=True, exist_ok=True)
            with self.error_log.open("a", encoding="utf-8") as fh:
                fh.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
                fh.write("".join(traceback.format_exception(error)))
        except OSError:
            return False
        return True


def shell_of(node: DOMNode) -> Shell:
    """The shell ``node`` runs in: every screen of the TUI is opened by one."""
    app = node.app
    if not isinstance(app, Shell):
        raise TypeError(f"{type(node).__name__} runs inside {type(app).__name__}, not an mlbench Shell")
    return app
