"""Reading spec text within bounds: the size cap before parsing, flow collections nested too deep
(found before the parser's quadratic scan of them), and a hint for JSON comments.

These checks keep ``validate`` fast on any input (each limit is met before the costly step it
guards) and turn what YAML itself would report badly into a message at the right line.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import IO

from mlbench_tui.errors import SpecIssue
from mlbench_tui.spec.limits import MAX_SPEC_BYTES, MAX_YAML_DEPTH

_FLOW_TOKEN = re.compile(r"[\[\]{}\"'#]")
_QUOTED = {'"': re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL), "'": re.compile(r"'(?:[^']|'')*'")}
_JSON_COMMENT = re.compile(r"^\s*(//|/\*)|[\s,\[{]//")
# What YAML text may hold (YAML 1.2, 5.1): tab, line breaks, printable ASCII, NEL and the rest of
# Unicode but surrogates, U+FFFE and U+FFFF.
_UNPRINTABLE = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


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


def unprintable(text: str) -> list[tuple[int, int, str]]:
    """Line, column and character of every character YAML text may not hold raw (a NUL, a bell),
    found before parsing, which would stop at the first."""
    out = []
    for match in _UNPRINTABLE.finditer(text):
        start = match.start()
        line = text.count("\n", 0, start) + 1
        out.append((line, start - (text.rfind("\n", 0, start) + 1) + 1, match.group()))
    return out


_YAML_DIRECTIVE = re.compile(r"^%YAML(?:[ \t]+(\S*))?", re.MULTILINE)


def other_yaml_versions(text: str) -> list[tuple[int, str]]:
    """Line and version of every ``%YAML`` directive that asks for another YAML than 1.2, found
    before parsing (ruamel reads 1.1 by other rules and stops with an assertion on 1.0)."""
    return [
        (text.count("\n", 0, match.start()) + 1, match.group(1) or "")
        for match in _YAML_DIRECTIVE.finditer(text)
        if match.group(1) != "1.2"
    ]


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
