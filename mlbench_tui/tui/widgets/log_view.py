"""Logs of all ranks interleaved, with rank tags, a rank filter, regex highlight, follow and wrap.

The widget keeps the last ``MAX_LINES`` lines it was given (the store keeps everything) and
redraws from that buffer when a filter changes, so filtering never needs the network. New lines
arrive in batches and are written with one ``RichLog.write`` per batch.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import RichLog

from mlbench_tui.tui.widgets.status_line import StatusLine

MAX_LINES = 20_000
RANK_STYLES = ("cyan", "magenta", "green", "yellow", "dodger_blue1", "orchid", "spring_green1", "orange1")
MATCH_STYLE = "black on yellow"


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One log line as the view keeps it (the wire's ``LogLineOut`` carries more)."""

    rank: int
    stream: str
    t: float
    text: str


def format_offset(seconds: float) -> str:
    """Time since the run started as ``+MM:SS.s`` (``+H:MM:SS`` past an hour): stable in any time zone."""
    seconds = max(0.0, seconds)
    if seconds >= 3600:
        whole = int(seconds)
        return f"+{whole // 3600}:{(whole % 3600) // 60:02d}:{whole % 60:02d}"
    minutes, rest = divmod(seconds, 60)
    return f"+{int(minutes):02d}:{rest:04.1f}"


class LogView(Vertical):
    """Status line + log; state: ``rank`` (None: all), ``pattern``, ``follow``, ``wrap``, ``only_matches``."""

    rank: reactive[int | None] = reactive(None)
    follow: reactive[bool] = reactive(True)
    wrap: reactive[bool] = reactive(False)
    only_matches: reactive[bool] = reactive(False)

    def __init__(self, *, origin_t: float = 0.0, id: str | None = None) -> None:
        super().__init__(id=id)
        self.origin_t = origin_t
        self.entries: deque[LogEntry] = deque(maxlen=MAX_LINES)
        self.ranks_seen: set[int] = set()
        self.pattern: re.Pattern[str] | None = None
        self.shown = 0  # lines currently written to the RichLog

    def compose(self) -> ComposeResult:
        yield StatusLine(id="log-status")
        yield RichLog(max_lines=MAX_LINES, wrap=False, auto_scroll=True, id="log")

    def on_mount(self) -> None:
        self._update_status()

    # -- data -------------------------------------------------------------------------------
    def add_lines(self, lines: Iterable[LogEntry]) -> None:
        """Append a batch: buffered, and the visible ones written to the log in one go."""
        batch = list(lines)
        if not batch:
            return
        self.entries.extend(batch)
        self.ranks_seen.update(e.rank for e in batch)
        visible = [e for e in batch if self._visible(e)]
        if visible:
            self._write(visible)
        self._update_status()

    def visible_entries(self) -> list[LogEntry]:
        return [e for e in self.entries if self._visible(e)]

    def _visible(self, entry: LogEntry) -> bool:
        if self.rank is not None and entry.rank != self.rank:
            return False
        return not (self.only_matches and self.pattern is not None and not self.pattern.search(entry.text))

    def render_entry(self, entry: LogEntry) -> Text:
        tag_style = RANK_STYLES[entry.rank % len(RANK_STYLES)]
        line = Text()
        line.append(f"[r{entry.rank}] ", style=f"bold {tag_style}")
        line.append(format_offset(entry.t - self.origin_t) + " ", style="grey50")
        body = Text(entry.text, style="red" if entry.stream == "stderr" else "")
        if self.pattern is not None:
            body.highlight_regex(self.pattern, MATCH_STYLE)
        line.append_text(body)
        return line

    def _write(self, entries: list[LogEntry]) -> None:
        log = self.query_one(RichLog)
        text = Text("\n").join(self.render_entry(e) for e in entries)
        log.write(text, scroll_end=self.follow)
        self.shown += len(entries)

    def redraw(self) -> None:
        """Rewrite the log from the buffer (after a filter, pattern or wrap change)."""
        log = self.query_one(RichLog)
        log.clear()
        log.wrap = self.wrap
        self.shown = 0
        visible = self.visible_entries()
        if visible:
            self._write(visible)
        self._update_status()

    # -- controls ---------------------------------------------------------------------------
    def set_pattern(self, pattern: str) -> str | None:
        """Highlight ``pattern`` (a regex; empty clears it). Returns an error message when invalid."""
        if not pattern:
            self.pattern = None
        else:
            try:
                self.pattern = re.compile(pattern)
            except re.error as exc:
                return f"invalid regex {pattern!r}: {exc}"
        self.redraw()
        return None

    def cycle_rank(self) -> None:
        """All ranks -> rank 0 -> rank 1 -> ... -> all ranks."""
        ranks = sorted(self.ranks_seen)
        if not ranks:
            self.rank = None
        elif self.rank is None:
            self.rank = ranks[0]
        else:
            later = [r for r in ranks if r > self.rank]
            self.rank = later[0] if later else None

    def watch_rank(self) -> None:
        if self.is_mounted:
            self.redraw()

    def watch_only_matches(self) -> None:
        if self.is_mounted:
            self.redraw()

    def watch_wrap(self) -> None:
        if self.is_mounted:
            self.redraw()

    def watch_follow(self, follow: bool) -> None:
        if not self.is_mounted:
            return
        log = self.query_one(RichLog)
        log.auto_scroll = follow
        if follow:
            log.scroll_end(animate=False)
        self._update_status()

    def save(self, path: Path) -> int:
        """Write the lines shown (after the rank filter and match filter) as plain text."""
        entries = self.visible_entries()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as fh:
            for e in entries:
                fh.write(f"[r{e.rank}] {format_offset(e.t - self.origin_t)} {e.text}\n")
        return len(entries)

    def _update_status(self) -> None:
        if not self.is_mounted:
            return
        status = Text()
        status.append(" ranks: ", style="bold")
        status.append("all" if self.rank is None else f"r{self.rank}")
        status.append("   search: ", style="bold")
        status.append(f"/{self.pattern.pattern}/" if self.pattern else "—")
        if self.only_matches:
            status.append(" (matching lines only)")
        status.append("   follow: ", style="bold")
        status.append("on" if self.follow else "paused", style="green" if self.follow else "yellow")
        status.append("   wrap: ", style="bold")
        status.append("on" if self.wrap else "off")
        status.append(f"   {self.shown}/{len(self.entries)} lines", style="grey50")
        self.query_one("#log-status", StatusLine).show(status)
