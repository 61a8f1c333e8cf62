"""Reading spec text within bounds: the size cap before parsing, a YAML composer that stops at the
first node too deep or one too many, control characters in values, and a hint for JSON comments.

These checks keep ``validate`` fast on any input (each limit is met before the costly step it
guards) and turn what YAML itself would report badly into a message at the right line.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import IO, Any

from ruamel.yaml.composer import Composer
from ruamel.yaml.error import MarkedYAMLError

from mlbench_tui.errors import SpecIssue
from mlbench_tui.spec.limits import MAX_SPEC_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES

_FLOW_TOKEN = re.compile(r"[\[\]{}\"'#]")
_QUOTED = {'"': re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL), "'": re.compile(r"'(?:[^']|'')*'")}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_JSON_COMMENT = re.compile(r"^\s*(//|/\*)|[\s,\[{]//")


class TooComplex(MarkedYAMLError):
    """A document nested deeper, or holding more nodes, than a spec may."""


class BoundedComposer(Composer):
    """ruamel's composer that refuses, at the node where it happens, nesting deeper than
    ``MAX_YAML_DEPTH`` or more than ``MAX_YAML_NODES`` nodes in one file (before building them)."""

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader)
        self.nodes = 0
        self.nesting = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        mark = self.parser.peek_event().start_mark
        self.nodes += 1
        if self.nodes > MAX_YAML_NODES:
            raise TooComplex(problem=f"more than {MAX_YAML_NODES} YAML values in one file", problem_mark=mark)
        self.nesting += 1
        try:
            if self.nesting > MAX_YAML_DEPTH:
                raise TooComplex(
                    problem=nesting_message(),
                    problem_mark=mark,
                )
            return super().compose_node(parent, index)
        finally:
            self.nesting -= 1


def flow_nesting(text: str) -> int | None:
    """The offset where ``[``/``{`` flow collections nest deeper than ``MAX_YAML_DEPTH``, or None.

    A linear scan before parsing (skipping quoted scalars and comments): ruamel's scanner keeps a
    possible simple key per open flow collection and takes quadratic time on deep nesting.
    """
    depth, pos = 0, 0
    while match := _FLOW_TOKEN.search(text, pos):
        char, start = match.group(), match.start()
        pos = start + 1
        before = text[start - 1] if start else "\n"
        if char in "[{":
            depth += 1
            if depth > MAX_YAML_DEPTH:
                return start
        elif char in "]}":
            depth = max(0, depth - 1)
        elif char == "#" and before.isspace():
            end = text.find("\n", start)
            pos = len(text) if end < 0 else end
        elif char in "\"'" and (before.isspace() or before in "[{,:-"):
            quoted = _QUOTED[char].match(text, start)
            pos = quoted.end() if quoted else len(text)
    return None


def nesting_message() -> str:
    return f"nested more than {MAX_YAML_DEPTH} levels deep: a spec nests 5 at most"


def size_problem(size: int) -> str | None:
    """Why ``size`` bytes of spec text are refused, or None when they fit."""
    if size <= MAX_SPEC_BYTES:
        return None
    cap = MAX_SPEC_BYTES // 1024
    return f"spec is larger than {cap} KiB ({size} bytes or more): split it into several files"


def read_capped(stream: IO[bytes]) -> tuple[bytes, bool]:
    """At most ``MAX_SPEC_BYTES`` bytes of ``stream`` and whether there was more (never reads all
    of an endless stream such as ``/dev/zero``)."""
    data = stream.read(MAX_SPEC_BYTES + 1)
    return data[:MAX_SPEC_BYTES], len(data) > MAX_SPEC_BYTES


def file_size(path: Path) -> int:
    """The size ``stat`` gives, 0 for what is not a regular file (a pipe: its reading is capped)."""
    info = path.stat()
    return info.st_size if path.is_file() else 0


def control_character(text: str, what: str = "value") -> str | None:
    """A message naming the first control character in ``text`` (tab and newline are fine) and
    where it is, or None."""
    match = _CONTROL.search(text)
    if match is None:
        return None
    return f"control character U+{ord(match.group()):04X} at character {match.start() + 1} of the {what}"


def json_comment_line(text: str, until_line: int) -> int | None:
    """The last line up to ``until_line`` (1-based) that holds a ``//`` or ``/*`` comment, as JSON
    editors allow and YAML does not; None when there is none."""
    found = None
    for number, line in enumerate(text.splitlines()[:until_line], start=1):
        if _JSON_COMMENT.search(line) and "://" not in line:
            found = number
    return found


COMMENT_HINT = "'//' starts no comment in YAML: it became part of the value; comments start with '#'"


def comment_hints(issues: list[SpecIssue], text: str) -> list[SpecIssue]:
    """Issues at a line that holds a ``//`` comment (``workers: 2 // two ranks`` reads as the
    value ``2 // two ranks``) say so, when they have no hint of their own."""
    lines = text.splitlines()
    return [
        dataclasses.replace(issue, hint=COMMENT_HINT)
        if issue.hint is None and 0 < issue.line <= len(lines) and json_comment_line(lines[issue.line - 1], 1)
        else issue
        for issue in issues
    ]


def broken_link(path: Path) -> SpecIssue:
    """A spec that is a symbolic link to nothing (a link copied without what it points to)."""
    return SpecIssue(
        str(path),
        1,
        1,
        f"a broken symbolic link: its target {os.readlink(path)} does not exist",
        "copy the file it points to (cp -L), or point the link at an existing spec",
    )
