"""The connection banner: shown while the server is unreachable, hidden when it answers again.

It watches the app's ``connected`` state, so every screen gets it by composing one; the data
on the screen stays as it was while the workers retry with backoff.
"""

from __future__ import annotations

from textual.widgets import Static


class ConnectionBanner(Static):
    """A one-line warning bound to ``app.connected`` / ``app.connection_detail``."""

    def on_mount(self) -> None:
        self.watch(self.app, "connected", self._sync, init=True)
        self.watch(self.app, "connection_detail", self._sync, init=False)

    def _sync(self, *_: object) -> None:
        connected = bool(getattr(self.app, "connected", True))
        self.display = not connected
        if not connected:
            url = getattr(self.app, "server_url", "the server")
            detail = getattr(self.app, "connection_detail", "")
            self.update(f"⚠ cannot reach {url}: {detail} — showing the last data, reconnecting…")
