"""A composed YAML tree as plain data: positions recorded, interpolated, each problem located.

The loader reads a document with ruamel's round-trip loader (``spec.composer``) and hands the
tree here. Every key and value becomes plain Python data (``${VAR}`` interpolated) while the line
and column of each node is recorded; what no spec field can hold is refused at its node: keys
that are not strings, control, invisible and bidirectional characters, letters of another script
that only look like ASCII (checked as the ASCII meant, so nothing else follows from them),
integers beyond 64 bits, NaN and infinity, binary values.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Mapping
from typing import Any

from mlbench_tui.errors import SpecIssue
from mlbench_tui.spec.characters import forbidden_character, foreign_letters, skeleton
from mlbench_tui.spec.composer import REFUSED_TAG
from mlbench_tui.spec.diagnostics import Loc, Positions, dotted
from mlbench_tui.spec.limits import MAX_YAML_NODES

_VAR_RE = re.compile(r"\$\$|\$\{([^}:]*)(?::-([^}]*))?\}")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INT_RE = re.compile(r"^[-+]?[0-9]+$")
_FLOAT_RE = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
INT64 = (-(2**63), 2**63 - 1)  # what SQLite, JSON readers and the ranks hold


class Converter:
    """Turns a ruamel round-trip tree into plain data, recording positions and problems."""

    def __init__(self, file: str, environ: Mapping[str, str]) -> None:
        self.file = file
        self.environ = environ
        self.positions = Positions()
        self.issues: list[SpecIssue] = []
        self.failed_locs: set[Loc] = set()
        self._nodes = 0
        self._active: set[int] = set()

    def issue(self, pos: tuple[int, int], message: str, hint: str | None = None) -> None:
        self.issues.append(SpecIssue(self.file, pos[0], pos[1], message, hint))

    def convert(self, node: Any, loc: Loc, pos: tuple[int, int]) -> Any:
        self._nodes += 1
        if self._nodes > MAX_YAML_NODES:
            raise TooLarge
        from ruamel.yaml.comments import TaggedScalar

        if _refused(node):  # the composer said why (YamlProblem)
            return None
        if isinstance(node, dict | list) and id(node) in self._active:
            self.issue(pos, f"{_dotted(loc)}: recursive YAML alias")
            self.failed_locs.add(loc)
            return None
        if isinstance(node, TaggedScalar):
            self.issue(pos, f"{_dotted(loc)}: unsupported YAML tag '{node.tag}'", "remove the tag")
            self.failed_locs.add(loc)
            return None
        if isinstance(node, Mapping):
            self._active.add(id(node))
            out: dict[str, Any] = {}
            lc = getattr(node, "lc", None)
            for key, value in node.items():
                kpos = _lc_pos(lc, "key", key, pos)
                vpos = _lc_pos(lc, "value", key, kpos)
                if _refused(key):
                    continue
                if not isinstance(key, str) or not _encodable(key):
                    self.issue(
                        kpos, f"{_dotted(loc)}: keys must be strings, got {type(key).__name__} {key!r}"
                    )
                    self.failed_locs.add(loc)
                    continue
                if bad := forbidden_character(key, "key"):
                    self.issue(kpos, f"{_dotted(loc)}: {bad}", "remove it")
                    self.failed_locs.add((*loc, key))
                    continue
                if foreign := foreign_letters(key, whole=True):
                    plain = skeleton(key)
                    self.issue(kpos, f"{_dotted(loc)}: key {foreign}", f"retype it in ASCII: '{plain}'")
                    key = plain  # checked as meant, so no other problem is a consequence of the letter
                child: Loc = (*loc, key)
                self.positions.keys[child] = kpos
                if isinstance(value, Mapping) and len(value):
                    vpos = node_start(value, vpos)
                self.positions.values[child] = vpos
                out[str(key)] = self.convert(value, child, vpos)
            self._active.discard(id(node))
            return out
        if isinstance(node, list):
            self._active.add(id(node))
            items: list[Any] = []
            lc = getattr(node, "lc", None)
            for i, value in enumerate(node):
                ipos = _lc_pos(lc, "item", i, pos)
                child = (*loc, i)
                self.positions.values[child] = ipos
                items.append(self.convert(value, child, ipos))
            self._active.discard(id(node))
            return items
        return self.scalar(node, loc, pos)

    def scalar(self, node: Any, loc: Loc, pos: tuple[int, int]) -> Any:
        if node is None or isinstance(node, bool):
            return node
        if isinstance(node, int):
            if not INT64[0] <= node <= INT64[1]:
                self.issue(
                    pos,
                    f"{_dotted(loc)}: {_short_number(node)} does not fit in 64 bits: the store and the "
                    "ranks hold integers from -2^63 to 2^63-1",
                )
                self.failed_locs.add(loc)
                return None
            return int(node)
        if isinstance(node, float):
            if not math.isfinite(node):
                self.issue(pos, f"{_dotted(loc)}: {node} is not a finite number", "write a finite number")
                self.failed_locs.add(loc)
                return None
            return float(node)
        if isinstance(node, _dt.datetime | _dt.date):
            return node.isoformat()
        if isinstance(node, str):
            if not _encodable(node):
                self.issue(pos, f"{_dotted(loc)}: invalid unicode escape (a lone surrogate such as \\ud800)")
                self.failed_locs.add(loc)
                return None
            if bad := forbidden_character(node):
                self.issue(pos, f"{_dotted(loc)}: {bad}", "remove it (a tab or a newline is fine)")
                self.failed_locs.add(loc)
                return None
            if foreign := foreign_letters(node, whole=False):
                plain = skeleton(node)
                self.issue(pos, f"{_dotted(loc)}: {foreign}", f"retype it in ASCII: {plain!r}")
                node = type(node)(plain)
            return self.interpolate(node, loc, pos, plain=type(node) is str)
        if isinstance(node, bytes):
            self.issue(pos, f"{_dotted(loc)}: binary values are not supported")
            self.failed_locs.add(loc)
            return None
        return str(node)

    def interpolate(self, text: str, loc: Loc, pos: tuple[int, int], *, plain: bool) -> Any:
        """Expand ``${VAR}`` and ``${VAR:-default}``; ``$$`` is a literal ``$``.

        A plain (unquoted) scalar that is exactly one ``${VAR}`` takes the YAML type of the value,
        so ``workers: ${WORKERS}`` with ``WORKERS=4`` is the integer 4.
        """
        if "$" not in text:
            return text
        missing: list[str] = []

        def repl(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            name, default = match.group(1), match.group(2)
            if not _NAME_RE.fullmatch(name):
                self.issue(pos, f"{_dotted(loc)}: invalid variable reference '{match.group(0)}'")
                self.failed_locs.add(loc)
                return match.group(0)
            if name in self.environ:
                return self.environ[name]
            if default is not None:
                return default
            missing.append(name)
            return match.group(0)

        result = _VAR_RE.sub(repl, text)
        for name in missing:
            self.issue(
                pos,
                f"{_dotted(loc)}: environment variable '{name}' is not set",
                f"export {name}=... or write ${{{name}:-default}}",
            )
            self.failed_locs.add(loc)
        if plain and not missing and _VAR_RE.fullmatch(text.strip()) and text.strip() != "$$":
            return _retype(result)
        return result


class TooLarge(Exception):
    """More nodes than a spec may hold, aliases expanded."""


def _refused(node: Any) -> bool:
    """Whether the composer refused ``node`` (it carries ``REFUSED_TAG``)."""
    tag = getattr(node, "tag", None)
    return getattr(tag, "value", tag) == REFUSED_TAG


def _short_number(value: int) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:10]}...{text[-4:]} ({len(text)} digits)"


def _retype(text: str) -> Any:
    """The YAML core-schema type of an interpolated plain scalar."""
    s = text.strip()
    if _INT_RE.fullmatch(s):
        return int(s)
    if _FLOAT_RE.fullmatch(s):
        return float(s)
    if s.lower() in ("true", "false"):
        return s.lower() == "true"
    if s.lower() in ("null", "~", ""):
        return None if s else text
    return text


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def node_start(node: Any, fallback: tuple[int, int] = (1, 1)) -> tuple[int, int]:
    """1-based start of a ruamel collection node, or ``fallback`` when ruamel kept none."""
    lc = getattr(node, "lc", None)
    line, col = getattr(lc, "line", None), getattr(lc, "col", None)
    if isinstance(line, int) and isinstance(col, int):
        return (line + 1, col + 1)
    return fallback


def _lc_pos(lc: Any, what: str, key: Any, fallback: tuple[int, int]) -> tuple[int, int]:
    try:
        line, col = getattr(lc, what)(key)
        return (int(line) + 1, int(col) + 1)
    except Exception:  # ruamel has no position for this node (e.g. merged keys)
        return fallback


def _dotted(loc: Loc) -> str:
    return dotted(loc)
