"""A one-line text widget that repaints only when its text changes and never asks for a layout.

Titles, status lines and the goal bar change several times a second on a busy run; a plain
``Static.update`` re-lays out the whole screen each time, which is most of the TUI's CPU under load.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class StatusLine(Static):
    """Fixed height 1 (see the stylesheet); ``show`` is a no-op when nothing changed."""

    DEFAULT_CSS = """
    StatusLine {
        height: 1;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._shown: Text | None = None

    def show(self, text: Text) -> None:
        if self._shown is not None and text == self._shown:
            return
        self._shown = text
        self.update(text, layout=False)
