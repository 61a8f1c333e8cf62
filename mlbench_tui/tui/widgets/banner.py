"""The connection banner: shown while the server is unreachable, hidden when it answers again.

It watches the app's ``connected`` state, so every screen gets it by composing one; the data
on the screen stays as it was while the workers retry with backoff.
"""

from __future__ import annotations

from textual.widgets import Static

from mlbench_tui.tui.shell import shell_of


class ConnectionBanner(Static):
    """A one-line warning bound to ``app.connected`` / ``app.connection_detail``."""

    def on_mount(self) -> None:
        shell = shell_of(self)
        self.watch(shell, "connected", self._sync, init=True)
        self.watch(shell, "connection_detail", self._sync, init=False)

    def _sync(self, *_: object) -> None:
        shell = shell_of(self)
        self.display = not shell.connected
        if not shell.connected:
            url, detail = shell.server_url, shell.connection_detail
            self.update(f"⚠ cannot reach {url}: {detail} — showing the last data, reconnecting…")
