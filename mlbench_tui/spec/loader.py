"""Load benchmark specs from files, directories and strings, reporting every problem at once.

YAML is read with ruamel's round-trip loader so every node keeps its line and column. The tree is
converted to plain Python data (``${VAR}`` interpolated) while a position index is recorded;
pydantic validates the data; catalog policy runs on valid specs; every problem, from a YAML syntax
error to a forbidden hyperparameter, becomes a ``SpecIssue`` ``file:line:col: message (hint)``.
Nothing here raises anything but ``SpecError``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mlbench_tui.errors import SpecError, SpecIssue
from mlbench_tui.spec.composer import TooComplex, YamlProblem, composer_for
from mlbench_tui.spec.converter import Converter, TooLarge, node_start
from mlbench_tui.spec.diagnostics import Loc, Positions, did_you_mean, dotted, issue_from_error
from mlbench_tui.spec.limits import MAX_ISSUES, MAX_RUNS, MAX_SPEC_BYTES
from mlbench_tui.spec.models import API_VERSION, KIND, BenchmarkSpec
from mlbench_tui.spec.policy import PolicyIssue, hyperparameter_issues, policy_issues
from mlbench_tui.spec.reading import (
    broken_link,
    comment_hints,
    file_size,
    flow_nesting,
    json_comment_line,
    nesting_message,
    other_yaml_versions,
    read_capped,
    size_problem,
    unprintable,
)
from mlbench_tui.spec.salvage import salvage, under
from mlbench_tui.spec.tasks import get_task

YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with where it came from and its source text (for the store and the TUI)."""

    spec: BenchmarkSpec
    file: str
    document: int  # 0-based index of the document in its file
    line: int  # 1-based line where the document starts
    text: str  # the document's source text as written (before interpolation)
    positions: Positions = field(default_factory=Positions, compare=False, repr=False)
    """Where each key and value of the document is, for problems found after loading (the plan's)."""


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
    return SpecIssue(file, line, col, f"{dotted(issue.loc)}: {issue.message}", issue.hint)


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
    if raw := unprintable(text):
        return [], _capped([_raw_character(file, line, col, char) for line, col, char in raw], file)
    if versions := other_yaml_versions(text):
        return [], [_other_version(file, line, version) for line, version in versions]
    if (deep := flow_nesting(text)) is not None:
        line = text.count("\n", 0, deep) + 1
        col = deep - (text.rfind("\n", 0, deep) + 1) + 1
        return [], [SpecIssue(file, line, col, nesting_message())]
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    problems: list[YamlProblem] = []
    yaml.Composer = composer_for(problems)
    docs: list[Any] = []
    issues: list[SpecIssue] = []
    try:
        for doc in yaml.load_all(text):
            docs.append(doc)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        if isinstance(exc, TooComplex):
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
    except (YAMLError, RecursionError, ValueError, TypeError, OverflowError, AssertionError) as exc:
        # ruamel's own consistency checks are assertions: an input that trips one is still bad YAML
        issues.append(SpecIssue(file, 1, 1, "cannot parse YAML: " + " ".join(str(exc).split())))
    loaded: list[LoadedSpec] = []
    starts: list[int] = []
    converted: list[tuple[int, Any, Converter]] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        conv = Converter(file, env)
        conv.positions.start = node_start(doc)
        for problem in problems:
            if problem.document == index and problem.refused:
                conv.failed_locs.add(problem.loc)
        try:
            data = conv.convert(doc, (), conv.positions.start)
        except (TooLarge, RecursionError):
            issues.append(SpecIssue(file, *conv.positions.start, "document too large or too deeply nested"))
            continue
        starts.append(conv.positions.start[0])
        converted.append((index, data, conv))
    if not converted and not issues and not problems:
        return [], [_empty_file(file)]
    texts = _document_texts(text, starts)
    composed = {index for index, _data, _conv in converted}
    issues.extend(_yaml_issue(p, file) for p in problems if p.document not in composed)
    for (index, data, conv), doc_text in zip(converted, texts, strict=True):
        yaml_issues = [_yaml_issue(p, file) for p in problems if p.document == index]
        spec, doc_issues = validate_document(data, file, conv.positions, conv.failed_locs)
        issues.extend(comment_hints(_sorted(conv.issues + yaml_issues + doc_issues), text))
        if spec is not None and not conv.issues and not yaml_issues:
            loaded.append(LoadedSpec(spec, file, index, conv.positions.start[0], doc_text, conv.positions))
    return loaded, _capped(issues, file)


def _other_version(file: str, line: int, version: str) -> SpecIssue:
    return SpecIssue(
        file,
        line,
        1,
        f"this file asks for YAML {version or '(no version)'} (%YAML {version}), whose booleans and "
        "numbers differ from YAML 1.2 ('yes' is true, '010' is 8, '1:30' is 90): a spec is YAML 1.2",
        "remove the %YAML line",
    )


def _raw_character(file: str, line: int, col: int, char: str) -> SpecIssue:
    code = ord(char)
    escape = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return SpecIssue(
        file,
        line,
        col,
        f"character U+{code:04X} written raw: YAML text holds no control character but tab and line breaks",
        f'remove it, or write it as an escape in a double-quoted string ("{escape}")',
    )


def _yaml_issue(problem: YamlProblem, file: str) -> SpecIssue:
    where = f"{dotted(problem.loc)}: " if problem.loc else ""
    return SpecIssue(file, problem.line, problem.col, where + problem.message, problem.hint)


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
    text: str, file: str = "<string>", environ: Mapping[str, str] | None = None, *, max_runs: int = MAX_RUNS
) -> list[LoadedSpec]:
    """Every spec in ``text``; raises ``SpecError`` with all issues if any document is invalid."""
    loaded, issues = collect_text(text, file, environ)
    issues.extend(set_issues(loaded, max_runs))
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
    paths: Sequence[str | Path], environ: Mapping[str, str] | None = None, *, max_runs: int = MAX_RUNS
) -> tuple[list[LoadedSpec], list[SpecIssue]]:
    """Every valid spec under ``paths`` (files or directories) and every issue; never raises.

    The specs together may expand to at most ``max_runs`` runs (one apply), and no two runs may
    share a name."""
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
    issues.extend(set_issues(loaded, max_runs))
    return loaded, issues


def collect_bytes(
    data: bytes, file: str = "<bytes>", environ: Mapping[str, str] | None = None
) -> tuple[list[LoadedSpec], list[SpecIssue]]:
    """Every spec in ``data`` (a file's bytes) and every issue; never raises."""
    return _collect_bytes(data[:MAX_SPEC_BYTES], len(data) > MAX_SPEC_BYTES, file, environ)


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


def set_issues(loaded: Sequence[LoadedSpec], max_runs: int = MAX_RUNS) -> list[SpecIssue]:
    """What a set of specs may not do together: expand to more than ``max_runs`` runs, or give two
    runs one name (each at the later spec, naming where the earlier one is). Names are compared
    among the specs within the cap, so the check costs no more than the runs it allows."""
    out: list[SpecIssue] = []
    total = 0
    for item in loaded:
        total += item.spec.run_count()
        if total > max_runs:
            out.append(_too_many_runs(loaded, item, max_runs))
            break
    named: dict[str, LoadedSpec] = {}
    owner: dict[str, LoadedSpec] = {}
    spec_names = {item.spec.name for item in loaded}
    # a run's name starts with its spec's: only specs one of whose names prefixes another's can clash
    prefixed = {
        n
        for n in spec_names
        for m in spec_names
        if m != n and (m.startswith(n + "-") or n.startswith(m + "-"))
    }
    for item in loaded:
        first = named.setdefault(item.spec.name, item)
        if first is not item:  # the store and `mlbench results` know a spec by its name
            out.append(_shared_names(item, first, []))
            continue
        if item.spec.name not in prefixed or item.spec.run_count() > max_runs:
            continue  # no clash is possible, or it is refused above (its names cost what the cap guards)
        clashes: dict[int, tuple[LoadedSpec, list[str]]] = {}
        for name in item.spec.run_names():
            other = owner.setdefault(name, item)
            if other is not item:
                clashes.setdefault(id(other), (other, []))[1].append(name)
        for other, names in clashes.values():
            out.append(_shared_names(item, other, names))
    return out


def _place(item: LoadedSpec, loc: Loc, *, key: bool = False) -> tuple[int, int]:
    if not item.positions.values:  # validated from data (no positions)
        return (item.line, 1)
    return item.positions.of_key(loc) if key else item.positions.of_value(loc)


def _too_many_runs(loaded: Sequence[LoadedSpec], item: LoadedSpec, max_runs: int) -> SpecIssue:
    total = sum(each.spec.run_count() for each in loaded)
    body = item.spec.spec
    factors = (
        f"{len(body.framework)} framework(s) x {len(body.backend)} backend(s) x {len(body.workers)} world "
        f"size(s) x {body.repeats} repeat(s) = {item.spec.run_count():,}"
    )
    where = "this spec expands" if len(loaded) == 1 else f"these {len(loaded)} specs expand"
    return SpecIssue(
        item.file,
        *_place(item, ("spec",), key=True),
        f"{where} to {total:,} runs, more than the {max_runs:,} one apply takes "
        f"({item.spec.name}: {factors})",
        f"sweep fewer values, or pass --max-runs {total} to take them all",
    )


def _shared_names(item: LoadedSpec, other: LoadedSpec, names: list[str]) -> SpecIssue:
    line, col = _place(other, ("metadata", "name"))
    where = f"{other.file}:{line}:{col}"
    if item.spec.name == other.spec.name:
        message = f"duplicate benchmark name '{item.spec.name}' (also at {where})"
    else:
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        message = (
            f"run '{names[0]}'{more} of this spec would share its name with a run of spec "
            f"'{other.spec.name}' at {where}"
        )
    return SpecIssue(
        item.file,
        *_place(item, ("metadata", "name")),
        message,
        "give each spec a unique metadata.name; run names derive from it",
    )


def load_paths(
    paths: Sequence[str | Path], environ: Mapping[str, str] | None = None, *, max_runs: int = MAX_RUNS
) -> list[LoadedSpec]:
    """Every spec under ``paths``; raises ``SpecError`` listing every issue if anything is wrong."""
    loaded, issues = collect_paths(paths, environ, max_runs=max_runs)
    if issues:
        raise SpecError(issues)
    return loaded
