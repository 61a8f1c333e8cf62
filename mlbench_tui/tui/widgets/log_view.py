"""Logs of all ranks interleaved, with rank tags, a rank filter, regex highlight, follow and wrap.

The widget keeps the last ``MAX_LINES`` lines it was given (the store keeps everything) and
redraws from that buffer when a filter changes, at once. A rank filter is a rank set (``0-7,512``,
or one rank); on a run of many ranks the buffer holds few lines of any one rank, so the owner
asks the server for the set's latest lines (``RanksChanged``) and hands them over
(``show_tail``): the view then shows those, and the set's new lines as they come. New lines
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
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import RichLog

from mlbench_tui.ranksets import RankSet
from mlbench_tui.tui.widgets.status_line import StatusLine

MAX_LINES = 20_000
REDRAW_LINES = 2_000  # lines written when the view is redrawn (a filter changed, shown again)
RANK_STYLES = ("cyan", "magenta", "green", "yellow", "dodger_blue1", "orchid", "spring_green1", "orange1")
MATCH_STYLE = "black on yellow"


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One log line as the view keeps it (the wire's ``LogLineOut`` carries more)."""

    rank: int
    stream: str
    t: float
    text: str
    id: int = 0  # the store's line id (0: not from the store)


def format_offset(seconds: float) -> str:
    """Time since the run started as ``+MM:SS.s`` (``+H:MM:SS`` past an hour): stable in any time zone."""
    seconds = max(0.0, seconds)
    if seconds >= 3600:
        whole = int(seconds)
        return f"+{whole // 3600}:{(whole % 3600) // 60:02d}:{whole % 60:02d}"
    minutes, rest = divmod(seconds, 60)
    return f"+{int(minutes):02d}:{rest:04.1f}"


class LogView(Vertical):
    """Status line + log; state: ``ranks`` (None: all), ``pattern``, ``follow``, ``wrap``,
    ``only_matches``."""

    class RanksChanged(Message):
        """The rank filter changed: the owner may fetch the set's latest lines (``show_tail``)."""

        def __init__(self, ranks: RankSet | None) -> None:
            super().__init__()
            self.ranks = ranks

    ranks: reactive[RankSet | None] = reactive(None)
    follow: reactive[bool] = reactive(True)
    wrap: reactive[bool] = reactive(False)
    only_matches: reactive[bool] = reactive(False)

    def __init__(self, *, origin_t: float = 0.0, id: str | None = None) -> None:
        super().__init__(id=id)
        self.origin_t = origin_t
        self.entries: deque[LogEntry] = deque(maxlen=MAX_LINES)
        self.tail: deque[LogEntry] | None = None  # the rank filter's lines from the server
        self.ranks_seen: set[int] = set()
        self.pattern: re.Pattern[str] | None = None
        self.shown = 0  # lines currently written to the RichLog
        self.live = True  # lines are written as they come (see set_live)
        self.match: int | None = None  # the log line the search last moved to
        self._match_note = ""  # where that line is among the matches, for the status line
        self._stale = False  # lines came, or a filter changed, while not live

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
        if self.tail is not None and self.ranks is not None:
            self.tail.extend(e for e in batch if e.rank in self.ranks)
        visible = [e for e in batch if self._visible(e)]
        if visible and self.live:
            self._write(visible)
        elif visible:
            self._stale = True
        self._update_status()

    def set_live(self, live: bool) -> None:
        """Write lines as they come (the view is shown) or only keep them (it is hidden: a
        run of 1,024 ranks logs more than is worth rendering unseen); shown again, it redraws."""
        self.live = live
        if live and self._stale:
            self.redraw()

    def show_tail(self, ranks: RankSet, lines: Iterable[LogEntry]) -> None:
        """Show the server's latest ``lines`` of ``ranks`` (and those that came since) while the
        filter is still ``ranks``."""
        if ranks != self.ranks:
            return
        tail = list(lines)
        last = tail[-1].id if tail else 0
        tail += [e for e in self.entries if e.rank in ranks and e.id > last]
        self.tail = deque(tail, maxlen=MAX_LINES)
        self.redraw()

    def visible_entries(self) -> list[LogEntry]:
        source = self.tail if self.tail is not None else self.entries
        return [e for e in source if self._visible(e)]

    def _visible(self, entry: LogEntry) -> bool:
        if self.ranks is not None and entry.rank not in self.ranks:
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
        """Rewrite the log from the buffer (after a filter, pattern or wrap change): its last
        ``REDRAW_LINES`` shown lines, at once or, while hidden, when shown again."""
        if not self.live:
            self._stale = True
            self._update_status()
            return
        self._stale = False
        self.match, self._match_note = None, ""  # the lines move: a search starts over
        log = self.query_one(RichLog)
        log.clear()
        log.wrap = self.wrap
        self.shown = 0
        visible = self.visible_entries()[-REDRAW_LINES:]
        if visible:
            self._write(visible)
        elif self.ranks is not None or (self.only_matches and self.pattern is not None):
            log.write(Text(self.empty_note(), style="grey50"))  # an empty pane says why
        self._update_status()

    def empty_note(self) -> str:
        """Why the filtered log shows nothing: the ranks chosen wrote nothing (so far), or no line
        matches the search."""
        source = self.tail if self.tail is not None else self.entries
        if self.ranks is not None and not any(e.rank in self.ranks for e in source):
            who = _ranks_label(self.ranks).removeprefix("r")
            ranks = f"rank {who}" if len(self.ranks) == 1 else f"ranks {who}"
            others = sum(1 for e in self.entries if e.rank not in self.ranks)
            return f"{ranks} wrote no log lines so far ({others} lines from the others)"
        return "no line matches the search"

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
            self.follow = False  # the view stays where the search moves it
        self.redraw()
        return None

    def match_lines(self) -> list[int]:
        """Lines of the log, as drawn, that match the search pattern."""
        if self.pattern is None:
            return []
        return [i for i, strip in enumerate(self.query_one(RichLog).lines) if self.pattern.search(strip.text)]

    def goto_match(self, step: int = 0) -> int | None:
        """Move to the first matching line (``step`` 0), or the next (1) or previous (-1) one
        from the last, wrapping around; following stops so the line stays in view. Returns
        the line, None when nothing matches."""
        lines = self.match_lines()
        if not lines:
            self.match, self._match_note = None, " (no match)"
            self._update_status()
            return None
        current = self.match
        if step == 0 or current is None:
            match = lines[0] if step >= 0 else lines[-1]
        elif step > 0:
            match = next((i for i in lines if i > current), lines[0])
        else:
            match = next((i for i in reversed(lines) if i < current), lines[-1])
        self.match, self._match_note = match, f" (match {lines.index(match) + 1}/{len(lines)})"
        self.follow = False
        log = self.query_one(RichLog)
        # after the scroll to the end that writing the lines queued
        log.scroll_to(
            y=max(0, match - log.scrollable_content_region.height // 2), animate=False, immediate=False
        )
        self._update_status()
        return match

    def cycle_rank(self) -> None:
        """All ranks -> rank 0 -> rank 1 -> ... -> all ranks (from a rank set: its next rank)."""
        ranks = sorted(self.ranks_seen)
        current = None if self.ranks is None else self.ranks.ranges[0][0]
        later = [r for r in ranks if current is None or r > current]
        self.ranks = RankSet(((later[0], later[0]),)) if later else None

    def watch_ranks(self, ranks: RankSet | None) -> None:
        self.tail = None
        if self.is_mounted:
            self.redraw()
            self.post_message(self.RanksChanged(ranks))

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
        status.append(_ranks_label(self.ranks))
        status.append("   search: ", style="bold")
        status.append(f"/{self.pattern.pattern}/" if self.pattern else "—")
        status.append(self._match_note)
        if self.only_matches:
            status.append(" (matching lines only)")
        status.append("   follow: ", style="bold")
        status.append("on" if self.follow else "paused", style="green" if self.follow else "yellow")
        status.append("   wrap: ", style="bold")
        status.append("on" if self.wrap else "off")
        status.append(f"   {self.shown}/{len(self.entries)} lines", style="grey50")
        self.query_one("#log-status", StatusLine).show(status)


def _ranks_label(ranks: RankSet | None) -> str:
    """``all``, ``r3``, or the set as typed back (``0-7,512``)."""
    if ranks is None:
        return "all"
    return f"r{ranks.ranges[0][0]}" if len(ranks) == 1 else str(ranks)
