"""``MlbenchApp``: the Textual application behind ``mlbench tui``.

The app owns what every screen shares: the server address, the connection state (the banner
binds to it), the keymap and the command palette. Screens own their data; their feeds run in
thread workers (see ``feed.py``). Everything reaches the engine through the HTTP API, except
launching and cancelling, which run the ``mlbench`` CLI as a subprocess (``launcher.py``).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from textual.app import App, SystemCommand
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.theme import Theme

from mlbench_tui.tui.actions import BY_ID, actions_for, bindings, display_key, resolve_keymap
from mlbench_tui.tui.feed import ServerAddress
from mlbench_tui.tui.launcher import Launcher
from mlbench_tui.tui.messages import CommandFinished, ConnectionChanged


class MlbenchApp(App[None]):
    """Runs table, run detail, specs, compare and help screens over one mlbench server."""

    CSS_PATH = Path(__file__).with_name("mlbench.tcss")
    TITLE = "mlbench"
    BINDINGS: ClassVar = bindings("app")
    ENABLE_COMMAND_PALETTE = True

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
        relocate: Callable[[], tuple[str, str | None, str | None]] | None = None,
    ) -> None:
        super().__init__()
        self._set_server(server_url, token, admin_token)
        self.user_keymap = dict(keymap or {})
        self.spec_path = spec_path
        self.clock = clock
        self.runs_interval = runs_interval
        self.update_interval = update_interval
        self.launcher = launcher or Launcher(self.server_url, admin_token or token)
        self._own_launcher = launcher is None
        # Local mode: how to find (or start) a server for the same store when ours goes away.
        self.relocate = relocate
        self._relocating = False
        self._relocated_at = 0.0
        self.error_log = error_log
        self.resolved_keymap, self.unknown_keys = resolve_keymap(self.user_keymap)
        self.first_paint: float | None = None  # wall time the runs table was first painted with data
        self.fatal_message: str | None = None

    # -- lifecycle --------------------------------------------------------------------------
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

    def _set_server(self, url: str, token: str | None, admin_token: str | None) -> None:
        self.server_url = url.rstrip("/")
        self.address = ServerAddress(self.server_url, token)
        self.admin_address = ServerAddress(self.server_url, admin_token or token)

    def get_theme(self, theme_name: str) -> Theme | None:
        """Textual's lookup, without its copy of the theme registry per call: it runs for every
        rendered line (through ``ansi_theme``), about a tenth of the TUI's CPU on a live run."""
        theme = self._registered_themes.get(theme_name)
        return theme if theme is not None else super().get_theme(theme_name)

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
            self._maybe_relocate()

    def _maybe_relocate(self) -> None:
        """Local mode: the server we used is gone (e.g. ``mlbench apply`` ended and took its
        embedded server with it); find or start another on the same store, at most every 5 s."""
        if self.relocate is None or self._relocating or time.monotonic() - self._relocated_at < 5.0:
            return
        self._relocating = True
        self._relocated_at = time.monotonic()
        relocate = self.relocate

        def find() -> None:
            try:
                url, token, admin = relocate()
            except Exception:
                self.call_from_thread(self._relocated, None)
                return
            self.call_from_thread(self._relocated, (url, token, admin))

        self.run_worker(find, thread=True, group="relocate", exit_on_error=False)

    def _relocated(self, found: tuple[str, str | None, str | None] | None) -> None:
        self._relocating = False
        if found is None:
            return
        url, token, admin = found
        if url.rstrip("/") != self.server_url:
            self._set_server(url, token, admin)
            if self._own_launcher:
                self.launcher = Launcher(self.server_url, admin or token)
            self.notify(f"switched to the local server at {self.server_url}", timeout=5)
        self.action_refresh_now()

    def post_status(self, message: Message) -> None:
        """Thread-safe: feeds call this to report the connection state to the app."""
        self.post_message(message)

    def on_command_finished(self, message: CommandFinished) -> None:
        if message.error:
            self.notify(f"{message.what}: {message.error}", severity="error", timeout=8)
        else:
            self.notify(message.message, timeout=4)

    # -- actions ----------------------------------------------------------------------------
    def action_show_help(self) -> None:
        from mlbench_tui.tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_open_specs(self) -> None:
        from mlbench_tui.tui.screens.spec import SpecScreen

        if not isinstance(self.screen, SpecScreen):
            self.push_screen(SpecScreen(self.spec_path or Path.cwd()))

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
    def report_error(self, what: str, error: BaseException) -> None:
        """A handler could not apply some data: keep running, say so once, log the traceback."""
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

    def _handle_exception(self, error: Exception) -> None:
        """Log an unexpected error's traceback to a file and exit with a one-line message.

        Replaces Textual's handler, which prints a full traceback; it keeps what Textual's test
        pilot relies on (the first exception is recorded and re-raised by ``run_test``).
        """
        self._return_code = 1
        if self._exception is None:
            self._exception = error
            self._exception_event.set()
        where = f" (details in {self.error_log})" if self._log_traceback(error) else ""
        self.fatal_message = (
            f"mlbench tui stopped on an internal error: {type(error).__name__}: {error}{where}"
        )
        self._close_messages_no_wait()
