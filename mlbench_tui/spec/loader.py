"""Load benchmark specs from files, directories and strings, reporting every problem at once.

YAML is read with ruamel's round-trip loader so every node keeps its line and column. The tree is
converted to plain Python data (``${VAR}`` interpolated) while a position index is recorded;
pydantic validates the data; catalog policy runs on valid specs; every problem, from a YAML syntax
error to a forbidden hyperparameter, becomes a ``SpecIssue`` ``file:line:col: message (hint)``.
Nothing here raises anything but ``SpecError``.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mlbench_tui.errors import SpecError, SpecIssue
from mlbench_tui.spec.diagnostics import Loc, Positions, did_you_mean, issue_from_error
from mlbench_tui.spec.limits import MAX_ISSUES, MAX_YAML_NODES
from mlbench_tui.spec.models import API_VERSION, KIND, BenchmarkSpec
from mlbench_tui.spec.policy import PolicyIssue, hyperparameter_issues, policy_issues
from mlbench_tui.spec.reading import (
    BoundedComposer,
    TooComplex,
    broken_link,
    comment_hints,
    control_character,
    file_size,
    flow_nesting,
    json_comment_line,
    nesting_message,
    read_capped,
    size_problem,
)
from mlbench_tui.spec.salvage import salvage, under
from mlbench_tui.spec.tasks import get_task

YAML_SUFFIXES = (".yaml", ".yml")

_VAR_RE = re.compile(r"\$\$|\$\{([^}:]*)(?::-([^}]*))?\}")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INT_RE = re.compile(r"^[-+]?[0-9]+$")
_FLOAT_RE = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with where it came from and its source text (for the store and the TUI)."""

    spec: BenchmarkSpec
    file: str
    document: int  # 0-based index of the document in its file
    line: int  # 1-based line where the document starts
    text: str  # the document's source text as written (before interpolation)


# --------------------------------------------------------------------------- YAML -> data


class _Converter:
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
            raise _TooLarge
        from ruamel.yaml.comments import TaggedScalar

        if isinstance(node, dict | list) and id(node) in self._active:
            self.issue(pos, f"{_dotted(loc)}: recursive YAML alias")
            self.failed_locs.add(loc)
            return None
        if isinstance(node, TaggedScalar):
            self.issue(pos, f"{_dotted(loc)}: unsupported YAML tag '{node.tag}'", "remove the tag")
            self.failed_locs.add(loc)
            return None
        if isinstance(node, Mapping):
            tag = getattr(getattr(node, "tag", None), "value", None)
            if tag and isinstance(tag, str) and tag.startswith("!") and not tag.startswith("!!"):
                self.issue(pos, f"{_dotted(loc)}: unsupported YAML tag '{tag}'", "remove the tag")
            self._active.add(id(node))
            out: dict[str, Any] = {}
            lc = getattr(node, "lc", None)
            for key, value in node.items():
                kpos = _lc_pos(lc, "key", key, pos)
                vpos = _lc_pos(lc, "value", key, kpos)
                if not isinstance(key, str) or not _encodable(key):
                    self.issue(
                        kpos, f"{_dotted(loc)}: keys must be strings, got {type(key).__name__} {key!r}"
                    )
                    self.failed_locs.add(loc)
                    continue
                child: Loc = (*loc, key)
                if bad := control_character(key, "key"):
                    self.issue(kpos, f"{_dotted(loc)}: {bad}", "remove it")
                    self.failed_locs.add(child)
                    continue
                self.positions.keys[child] = kpos
                if isinstance(value, Mapping) and len(value):
                    vpos = _node_start(value, vpos)
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
            return int(node)
        if isinstance(node, float):
            return float(node)
        if isinstance(node, _dt.datetime | _dt.date):
            return node.isoformat()
        if isinstance(node, str):
            if not _encodable(node):
                self.issue(pos, f"{_dotted(loc)}: invalid unicode escape (a lone surrogate such as \\ud800)")
                self.failed_locs.add(loc)
                return None
            if bad := control_character(node):
                self.issue(pos, f"{_dotted(loc)}: {bad}", "remove it (a tab or a newline is fine)")
                self.failed_locs.add(loc)
                return None
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


class _TooLarge(Exception):
    pass


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


def _node_start(node: Any, fallback: tuple[int, int] = (1, 1)) -> tuple[int, int]:
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
    from mlbench_tui.spec.diagnostics import dotted

    return dotted(loc)


# --------------------------------------------------------------------------- validation


def _type_word(data: Any) -> str:
    if isinstance(data, list):
        return "a list"
    if isinstance(data, str):
        return "a string"
    if isinstance(data, bool):
        return "a boolean"
    if isinstance(data, int | float):
        return "a number"
    return type(data).__name__


def validate_document(
    data: Any, file: str, positions: Positions | None = None, failed_locs: Iterable[Loc] = ()
) -> tuple[BenchmarkSpec | None, list[SpecIssue]]:
    """Validate one document's plain data: header, models, then catalog policy.

    ``failed_locs`` are paths whose values already produced an issue (e.g. an unset variable);
    model errors under them are not repeated.
    """
    pos = positions or Positions()
    failed = set(failed_locs)
    if not isinstance(data, Mapping):
        return None, [
            SpecIssue(
                file,
                *pos.start,
                "a spec document must be a mapping with apiVersion, kind, metadata and spec, "
                f"got {_type_word(data)}",
            )
        ]
    header: list[SpecIssue] = []
    api, kind = data.get("apiVersion"), data.get("kind")
    if "apiVersion" not in data:
        hint = "write 'apiVersion' (camelCase)" if "api_version" in data or "apiversion" in data else None
        header.append(
            SpecIssue(file, *pos.start, f"missing apiVersion: add 'apiVersion: {API_VERSION}'", hint)
        )
    elif api != API_VERSION:
        header.append(
            SpecIssue(
                file,
                *pos.of_value(("apiVersion",)),
                f"unsupported apiVersion {api!r}: this mlbench reads '{API_VERSION}'",
                did_you_mean(str(api), [API_VERSION]),
            )
        )
    if "kind" not in data:
        header.append(SpecIssue(file, *pos.start, f"missing kind: add 'kind: {KIND}'"))
    elif kind != KIND:
        header.append(
            SpecIssue(
                file,
                *pos.of_value(("kind",)),
                f"kind {kind!r} is not a mlbench spec: expected '{KIND}'",
                did_you_mean(str(kind), [KIND]),
            )
        )
    if header:
        return None, header
    try:
        spec = BenchmarkSpec.model_validate(data)
    except ValidationError as exc:
        issues = []
        bad_locs: set[Loc] = set()
        for error in exc.errors(include_url=False):
            loc = tuple(error["loc"])
            bad_locs.add(loc[:2])
            if any(loc[: len(f)] == f for f in failed):
                continue
            issues.append(issue_from_error(error, data, pos, file, BenchmarkSpec))
        issues.extend(_partial_policy(data, file, pos, bad_locs | {f[:2] for f in failed}))
        rest, removed = salvage(data, exc.errors(include_url=False))
        if rest is not None:  # the catalog, policy and placement problems of what is left
            skip = removed | failed
            issues.extend(_policy_issue(p, file, pos) for p in policy_issues(rest) if not under(p.loc, skip))
        return None, _sorted(_dedupe(issues))
    issues = [_policy_issue(p, file, pos) for p in policy_issues(spec) if not under(p.loc, failed)]
    if failed:
        return None, _sorted(issues)
    return (None, _sorted(issues)) if issues else (spec, [])


def _partial_policy(data: Mapping[str, Any], file: str, pos: Positions, bad: set[Loc]) -> list[SpecIssue]:
    """Hyperparameter policy for a document that failed elsewhere, so all errors show at once."""
    body = data.get("spec")
    if not isinstance(body, Mapping) or ("spec", "task") in bad or ("spec", "hyperparameters") in bad:
        return []
    task = get_task(body["task"]) if isinstance(body.get("task"), str) else None
    hps = body.get("hyperparameters")
    if task is None or not isinstance(hps, Mapping):
        return []
    backend = body.get("backend", [])
    backends = [b for b in (backend if isinstance(backend, list) else [backend]) if isinstance(b, str)]
    return [_policy_issue(p, file, pos) for p in hyperparameter_issues(task, hps, backends)]


def _policy_issue(issue: PolicyIssue, file: str, pos: Positions) -> SpecIssue:
    line, col = pos.of_key(issue.loc) if issue.at_key else pos.of_value(issue.loc)
    return SpecIssue(file, line, col, f"{_dotted(issue.loc)}: {issue.message}", issue.hint)


def _sorted(issues: list[SpecIssue]) -> list[SpecIssue]:
    return sorted(issues, key=lambda i: (i.line, i.col))


def _dedupe(issues: list[SpecIssue]) -> list[SpecIssue]:
    seen: set[SpecIssue] = set()
    out = []
    for issue in issues:
        if issue not in seen:
            seen.add(issue)
            out.append(issue)
    return out


def validate_data(data: Any, file: str = "<data>") -> BenchmarkSpec:
    """Validate already-parsed data (e.g. JSON from the HTTP API); raises ``SpecError``."""
    spec, issues = validate_document(data, file)
    if spec is None:
        raise SpecError(issues or [SpecIssue(file, 1, 1, "invalid spec")])
    return spec


# --------------------------------------------------------------------------- text and files


def _document_texts(text: str, starts: list[int]) -> list[str]:
    """Source text of each document given their 1-based start lines (header comments go to the first)."""
    lines = text.splitlines(keepends=True)
    out = []
    for i, start in enumerate(starts):
        begin = 0 if i == 0 else start - 1
        end = starts[i + 1] - 1 if i + 1 < len(starts) else len(lines)
        chunk = lines[begin:end]
        while chunk and chunk[-1].strip() in ("---", "...", ""):
            chunk.pop()
        out.append("".join(chunk))
    return out


def _empty_file(file: str) -> SpecIssue:
    return SpecIssue(
        file,
        1,
        1,
        "file is empty (no YAML document): expected a Benchmark spec",
        "run `mlbench init` to write one",
    )


def collect_text(
    text: str, file: str = "<string>", environ: Mapping[str, str] | None = None
) -> tuple[list[LoadedSpec], list[SpecIssue]]:
    """Every valid spec in ``text`` and every issue found; never raises."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    env = os.environ if environ is None else environ
    if too_large := size_problem(len(text.encode("utf-8", "surrogatepass"))):
        return [], [SpecIssue(file, 1, 1, too_large)]
    if not text.strip():
        return [], [_empty_file(file)]
    if (deep := flow_nesting(text)) is not None:
        line = text.count("\n", 0, deep) + 1
        col = deep - (text.rfind("\n", 0, deep) + 1) + 1
        return [], [SpecIssue(file, line, col, nesting_message())]
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.Composer = BoundedComposer
    docs: list[Any] = []
    issues: list[SpecIssue] = []
    try:
        for doc in yaml.load_all(text):
            docs.append(doc)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        if type(exc).__name__ == "DuplicateKeyError":
            problem = problem.replace("found duplicate key", "duplicate key")
            issues.append(SpecIssue(file, line, col, problem, "remove or merge the repeated key"))
        elif isinstance(exc, TooComplex):
            issues.append(SpecIssue(file, line, col, problem))
        else:
            context = ""
            if exc.context and exc.problem:
                cm = exc.context_mark
                where = f" at line {cm.line + 1}:{cm.column + 1}" if cm and cm.line + 1 != line else ""
                context = f" ({exc.context}{where})"
            comment = json_comment_line(text, line)
            hint = (
                f"line {comment} holds a '//' or '/*' comment: YAML comments start with '#'"
                if comment
                else None
            )
            issues.append(SpecIssue(file, line, col, f"YAML syntax error: {problem}{context}", hint))
    except (YAMLError, RecursionError, ValueError, TypeError, OverflowError) as exc:
        issues.append(SpecIssue(file, 1, 1, f"cannot parse YAML: {exc}"))
    loaded: list[LoadedSpec] = []
    starts: list[int] = []
    converted: list[tuple[int, Any, _Converter]] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        conv = _Converter(file, env)
        conv.positions.start = _node_start(doc)
        try:
            data = conv.convert(doc, (), conv.positions.start)
        except (_TooLarge, RecursionError):
            issues.append(SpecIssue(file, *conv.positions.start, "document too large or too deeply nested"))
            continue
        starts.append(conv.positions.start[0])
        converted.append((index, data, conv))
    if not converted and not issues:
        return [], [_empty_file(file)]
    texts = _document_texts(text, starts)
    for (index, data, conv), doc_text in zip(converted, texts, strict=True):
        spec, doc_issues = validate_document(data, file, conv.positions, conv.failed_locs)
        issues.extend(comment_hints(_sorted(conv.issues + doc_issues), text))
        if spec is not None and not conv.issues:
            loaded.append(LoadedSpec(spec, file, index, conv.positions.start[0], doc_text))
    return loaded, _capped(issues, file)


def _capped(issues: list[SpecIssue], file: str) -> list[SpecIssue]:
    """The first ``MAX_ISSUES`` issues of a file, then one line saying how many more there are."""
    if len(issues) <= MAX_ISSUES:
        return issues
    last = issues[MAX_ISSUES - 1]
    more = len(issues) - MAX_ISSUES + 1
    return [
        *issues[: MAX_ISSUES - 1],
        SpecIssue(file, last.line, last.col, f"... and {more} more problem(s)"),
    ]


def load_text(
    text: str, file: str = "<string>", environ: Mapping[str, str] | None = None
) -> list[LoadedSpec]:
    """Every spec in ``text``; raises ``SpecError`` with all issues if any document is invalid."""
    loaded, issues = collect_text(text, file, environ)
    if issues:
        raise SpecError(issues)
    return loaded


def spec_files(path: Path) -> list[Path]:
    """``*.yaml``/``*.yml`` files under a directory, sorted, skipping hidden directories."""
    out = []
    for candidate in sorted(path.rglob("*")):
        rel = candidate.relative_to(path)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if candidate.suffix in YAML_SUFFIXES and (candidate.is_file() or candidate.is_symlink()):
            out.append(candidate)  # a broken link too: collect_paths says so
    return out


def collect_paths(
    paths: Sequence[str | Path], environ: Mapping[str, str] | None = None
) -> tuple[list[LoadedSpec], list[SpecIssue]]:
    """Every valid spec under ``paths`` (files or directories) and every issue; never raises."""
    loaded: list[LoadedSpec] = []
    issues: list[SpecIssue] = []
    seen: set[Path] = set()
    for raw in paths:
        if str(raw) == "-":
            import sys

            data, more = read_capped(sys.stdin.buffer)
            got, problems = _collect_bytes(data, more, "<stdin>", environ)
            loaded.extend(got)
            issues.extend(problems)
            continue
        path = Path(raw)
        if path.is_dir():
            files = spec_files(path)
            if not files:
                issues.append(SpecIssue(str(path), 1, 1, "no *.yaml or *.yml files in this directory"))
        elif path.exists():
            files = [path]
        elif path.is_symlink():
            issues.append(broken_link(path))
            continue
        else:
            issues.append(SpecIssue(str(path), 1, 1, "no such file or directory"))
            continue
        for file in files:
            if file.is_symlink() and not file.exists():
                issues.append(broken_link(file))
                continue
            key = file.resolve()
            if key in seen:  # the same file named twice (a directory and a file in it)
                continue
            seen.add(key)
            try:
                if too_large := size_problem(file_size(file)):
                    issues.append(SpecIssue(str(file), 1, 1, too_large))
                    continue
                with file.open("rb") as stream:
                    data, more = read_capped(stream)
            except OSError as exc:
                issues.append(SpecIssue(str(file), 1, 1, f"cannot read: {exc.strerror or exc}"))
                continue
            got, problems = _collect_bytes(data, more, str(file), environ)
            loaded.extend(got)
            issues.extend(problems)
    issues.extend(_duplicate_names(loaded))
    return loaded, issues


def _collect_bytes(
    data: bytes, more: bool, file: str, environ: Mapping[str, str] | None
) -> tuple[list[LoadedSpec], list[SpecIssue]]:
    """``collect_text`` of bytes read with ``read_capped`` (``more``: the input went on past the cap)."""
    if more and (too_large := size_problem(len(data) + 1)):
        return [], [SpecIssue(file, 1, 1, too_large)]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return [], [SpecIssue(file, 1, 1, "not a UTF-8 text file")]
    return collect_text(text, file, environ)


def _duplicate_names(loaded: list[LoadedSpec]) -> list[SpecIssue]:
    first: dict[str, LoadedSpec] = {}
    out = []
    for item in loaded:
        name = item.spec.metadata.name
        if name in first:
            other = first[name]
            out.append(
                SpecIssue(
                    item.file,
                    item.line,
                    1,
                    f"duplicate benchmark name '{name}' (also at {other.file}:{other.line})",
                    "give each spec a unique metadata.name; run names derive from it",
                )
            )
        else:
            first[name] = item
    return out


def load_paths(paths: Sequence[str | Path], environ: Mapping[str, str] | None = None) -> list[LoadedSpec]:
    """Every spec under ``paths``; raises ``SpecError`` listing every issue if anything is wrong."""
    loaded, issues = collect_paths(paths, environ)
    if issues:
        raise SpecError(issues)
    return loaded
