"""Spec commands: ``validate``, ``plan``, ``schema``, ``tasks``, ``init``.

Only argparse and the stdlib are imported at module level so ``mlbench --help`` stays fast; the
spec library (pydantic, ruamel) is imported inside the handlers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench_tui.commands.usage import documented

if TYPE_CHECKING:
    from mlbench_tui.errors import SpecIssue
    from mlbench_tui.plan import RunPlan
    from mlbench_tui.spec.loader import LoadedSpec
    from mlbench_tui.spec.tasks import TaskInfo


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the spec commands to the ``mlbench`` parser."""
    p = sub.add_parser(
        "validate",
        help="check spec files or directories and report every problem",
        description="Validate benchmark specs (files or directories of *.yaml/*.yml). "
        "Problems go to stderr as FILE:LINE:COL: MESSAGE (hint: ...), every one at once. validate "
        "checks what a spec says, the catalog and the target's limits; plan and apply also check that "
        "this machine (or the cluster) can place the runs, such as their GPUs.",
        **documented("validate"),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="spec file or directory ('-' reads stdin)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")
    max_runs_option(p)
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser(
        "plan",
        help="show the runs a spec expands to (sweeps x repeats), without running anything",
        description="Expand specs into run plans: one per backend x workers x repeat, and check that "
        "this machine (or the target) can place them.",
        **documented("plan"),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="spec file or directory ('-' reads stdin)")
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "yaml", "json", "sbatch"),
        default="table",
        help="output format (sbatch: the batch scripts of a slurm target)",
    )
    max_runs_option(p)
    p.set_defaults(handler=cmd_plan)

    p = sub.add_parser("schema", help="print the JSON Schema of the spec language", **documented("schema"))
    p.set_defaults(handler=cmd_schema)

    p = sub.add_parser(
        "tasks",
        help="list the official tasks (or show one task's hyperparameters)",
        description="The official task catalog: goals, defaults, supported backends and precisions; "
        "with TASK, its page of the reference (docs/tasks/), the same text.",
        **documented("tasks"),
    )
    p.add_argument("task", nargs="?", metavar="TASK", help="task id or name to show in detail")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    p.set_defaults(handler=cmd_tasks)

    p = sub.add_parser(
        "explain",
        help="explain a spec field: type, default, bounds, example, targets",
        description="Print the reference of one spec field (a path such as spec.hardware.gpu, or its "
        "tail such as gpu; a section prints its fields too), as docs/spec.md has it. With no FIELD, "
        "every field's path.",
        **documented("explain"),
    )
    p.add_argument("field", nargs="?", metavar="FIELD", help="field path or name")
    p.set_defaults(handler=cmd_explain)

    p = sub.add_parser(
        "docs",
        help="write the Markdown reference (spec fields and task pages) to a folder",
        description="Write the reference generated from the spec schema and the task catalog: "
        "README.md, spec.md and tasks/<id>.md (the repository's docs/ is this output).",
        **documented("docs"),
    )
    p.add_argument("--out", type=Path, default=Path("docs"), metavar="DIR", help="folder (default docs)")
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when DIR differs from what would be written",
    )
    p.set_defaults(handler=cmd_docs)

    p = sub.add_parser(
        "init",
        help="write a commented example spec for a task",
        description="Write a commented, valid spec for TASK (default: resnet20-cifar10) to stdout or a file.",
        **documented("init"),
    )
    p.add_argument("task", nargs="?", default="1a", metavar="TASK", help="task id or name (default: 1a)")
    p.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("-f", "--force", action="store_true", help="overwrite FILE if it exists")
    p.add_argument("--name", help="metadata.name (default: derived from the task)")
    p.set_defaults(handler=cmd_init)


# --------------------------------------------------------------------------- helpers


DEFAULT_MAX_RUNS = 1000  # mlbench_tui.spec.limits.MAX_RUNS (not imported: --help stays light)


def max_runs_option(p: argparse.ArgumentParser) -> None:
    """``--max-runs N``: the most runs the specs may expand to together."""
    p.add_argument(
        "--max-runs",
        type=positive_int,
        default=DEFAULT_MAX_RUNS,
        metavar="N",
        help=f"the most runs the specs may expand to together (default {DEFAULT_MAX_RUNS}); a larger sweep "
        "is refused before anything is planned",
    )


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain, left-aligned text table (no colours, safe to pipe)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines) + "\n"


def _issue_json(issue: SpecIssue) -> dict[str, Any]:
    return {
        "file": issue.file,
        "line": issue.line,
        "col": issue.col,
        "message": issue.message,
        "hint": issue.hint,
    }


def _yaml_dump(data: Any) -> str:
    import io

    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    buf = io.StringIO()
    yaml.dump_all(data, buf)
    return buf.getvalue()


# --------------------------------------------------------------------------- validate


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate every spec under the paths; print issues to stderr, exit 2 on any."""
    from mlbench_tui.spec.loader import collect_paths

    loaded, issues = collect_paths(args.paths, max_runs=args.max_runs)
    if args.output == "json":
        doc = {
            "ok": not issues,
            "specs": [_spec_summary(item, item.spec.run_count()) for item in loaded],
            "issues": [_issue_json(i) for i in issues],
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 2 if issues else 0
    for issue in issues:
        print(issue.render(), file=sys.stderr)
    if issues:
        files = len({i.file for i in issues})
        print(f"{len(issues)} problem(s) in {files} file(s)", file=sys.stderr)
        return 2
    if not args.quiet:
        for item in loaded:
            runs = item.spec.run_count()
            print(f"ok  {item.file}: {item.spec.metadata.name} (task {item.spec.spec.task}, {runs} run(s))")
    for note in placement_notes(loaded):
        print(note, file=sys.stderr)
    return 0


def placement_notes(loaded: Sequence[LoadedSpec]) -> list[str]:
    """What ``plan`` and ``apply`` would refuse on this machine although the spec is valid (local
    targets only: validate never contacts a cluster). validate checks the spec, which may be meant
    for another machine; it says so instead of staying silent."""
    from mlbench_tui.errors import MlbenchError
    from mlbench_tui.executors import executor_class
    from mlbench_tui.plan import expand
    from mlbench_tui.runs.plans import check_placement

    notes = []
    for item in loaded:
        # a cluster's placement is not asked: validate never contacts one
        offline = [plan for plan in expand(item.spec) if executor_class(plan.target.kind).places_offline]
        try:
            check_placement(offline)
        except MlbenchError as exc:
            notes.append(
                f"note: {item.file}: valid, but this machine cannot run it as it is (plan and apply refuse "
                f"it here): {exc.message}"
            )
    return notes


def _spec_summary(item: LoadedSpec, runs: int) -> dict[str, Any]:
    from mlbench_tui.plan import spec_hash

    return {
        "file": item.file,
        "document": item.document,
        "line": item.line,
        "name": item.spec.metadata.name,
        "task": item.spec.spec.task,
        "runs": runs,
        "spec_hash": spec_hash(item.spec),
    }


# --------------------------------------------------------------------------- plan


def cmd_plan(args: argparse.Namespace) -> int:
    """Load specs (exit 2 on any problem) and print their expanded run plans."""
    from mlbench_tui.plan import expand, plan_warnings
    from mlbench_tui.runs.plans import check_placement
    from mlbench_tui.spec.loader import load_paths

    plans: list[RunPlan] = []
    for item in load_paths(args.paths, max_runs=args.max_runs):
        plans.extend(expand(item.spec))
    check_placement(plans)
    for warning in plan_warnings(plans, os.cpu_count() or 1):
        print(f"warning: {warning}", file=sys.stderr)
    sys.stdout.write(render_plans(plans, args.output))
    return 0


def plan_documents(plans: Sequence[RunPlan]) -> list[dict[str, Any]]:
    """Plans as plain JSON data, in order (what ``plan -o json|yaml`` prints)."""
    return [plan.model_dump(mode="json") for plan in plans]


def render_plans(plans: Sequence[RunPlan], output: str) -> str:
    """Text for ``mlbench plan -o table|yaml|json|sbatch``."""
    if output == "json":
        return json.dumps(plan_documents(plans), indent=2) + "\n"
    if output not in ("table", "json"):  # a target's own format (sbatch scripts, manifests)
        from mlbench_tui.executors import plan_output

        text = plan_output(plans, output)
        if text is not None:
            return text
    if output == "yaml":
        return _yaml_dump(plan_documents(plans))
    rows = []
    networked = any(p.network is not None for p in plans)
    for p in plans:
        goal = (
            "-"
            if p.goal is None
            else f"{p.goal.metric} {'>=' if p.goal.direction == 'max' else '<='} {p.goal.target:g}"
        )
        gpus = f"{p.resources.gpus}x{p.resources.gpu_type}" if p.resources.gpu_type else str(p.resources.gpus)
        rows.append(
            [
                p.name,
                p.task,
                p.backend,
                p.workers,
                p.resources.threads_per_rank,
                gpus,
                p.resources.precision,
                goal,
                "-" if p.max_time_s is None else _duration(p.max_time_s),
                p.target.kind,
                *([network_column(p)] if networked else []),
            ]
        )
    headers = [
        "NAME",
        "TASK",
        "BACKEND",
        "WORKERS",
        "THREADS",
        "GPUS",
        "PRECISION",
        "GOAL",
        "MAX TIME",
        "TARGET",
        *(["NETWORK"] if networked else []),
    ]
    return render_table(headers, rows) + "".join(f"{note}\n" for note in network_notes(plans))


def network_column(plan: RunPlan) -> str:
    """The plan's links as its target makes them (``100Mbit +5ms, 2 nodes`` locally), ``-`` without."""
    from mlbench_tui.executors import executor_class

    return executor_class(plan.target.kind).network_label(plan)


def network_notes(plans: Sequence[RunPlan]) -> list[str]:
    """What the plans' networks mean where they run, said once under the table (by their targets)."""
    from mlbench_tui.executors import executor_class

    notes: list[str] = []
    for kind in dict.fromkeys(p.target.kind for p in plans if p.network is not None):
        shaped = [p for p in plans if p.network is not None and p.target.kind == kind]
        notes += executor_class(kind).network_notes(shaped)
    return notes


def _duration(seconds: float) -> str:
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (sec, "s")) if v) or "0s"


# --------------------------------------------------------------------------- schema


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the JSON Schema (the content of specs/mlbench.schema.json)."""
    from mlbench_tui.spec.schema import schema_text

    sys.stdout.write(schema_text())
    return 0


# --------------------------------------------------------------------------- tasks


def _resolve_task(key: str) -> TaskInfo:
    from mlbench_tui.errors import UsageError
    from mlbench_tui.spec.diagnostics import did_you_mean
    from mlbench_tui.spec.tasks import TASK_KEYS, get_task

    task = get_task(key)
    if task is None:
        hint = did_you_mean(key, TASK_KEYS) or f"one of: {', '.join(TASK_KEYS)}"
        raise UsageError(f"unknown task '{key}'", hint=hint)
    return task


def _task_json(task: TaskInfo) -> dict[str, Any]:
    from mlbench_tui.reference.task_pages import data_option_rows

    return {
        "id": task.id,
        "name": task.name,
        "title": task.title,
        "model": task.model,
        "dataset": task.dataset,
        "goal": None
        if task.goal is None
        else {
            "metric": task.goal.metric,
            "direction": task.goal.direction,
            "full": task.goal.full,
            "light": task.goal.light,
        },
        "backends": list(task.backends),
        "precisions": list(task.precisions),
        "frameworks": list(task.frameworks),
        "lr_scaling": task.lr_scaling,
        "defaults": dict(task.defaults),
        "overridable": sorted(task.overridable),
        "choices": {k: list(v) for k, v in task.choices.items()},
        "descriptions": {k: task.knobs[k].description for k in task.defaults},
        "notes": task.notes,
        "data_options": {
            source: {
                name: {"default": default, "description": task_knob.description, "bounds": bounds}
                for name, default, task_knob, bounds in data_option_rows(cls)
            }
            for source, cls in task.data_options.items()
        },
    }


def cmd_tasks(args: argparse.Namespace) -> int:
    """Print the task catalog, or one task's hyperparameters and policy."""
    from mlbench_tui.reference.task_pages import precisions_short, task_page
    from mlbench_tui.spec.tasks import TASKS

    tasks = [_resolve_task(args.task)] if args.task else list(TASKS.values())
    if args.output == "json":
        sys.stdout.write(json.dumps([_task_json(t) for t in tasks], indent=2) + "\n")
        return 0
    if args.task:
        from mlbench_tui.commands.data import DESCRIPTIONS

        sys.stdout.write(task_page(tasks[0], DESCRIPTIONS))
        return 0
    rows = []
    for t in tasks:
        g = t.goal
        rows.append(
            [
                t.id,
                t.name,
                t.model.split(" (")[0],
                t.dataset.split(" (")[0],
                g.metric if g else "-",
                f"{'>=' if g.direction == 'max' else '<='} {g.full:g}" if g else "-",
                f"{'>=' if g.direction == 'max' else '<='} {g.light:g}" if g else "-",
                ",".join(t.backends),
                precisions_short(t),
            ]
        )
    headers = ["ID", "NAME", "MODEL", "DATASET", "GOAL METRIC", "FULL", "LIGHT", "BACKENDS", "PRECISIONS"]
    sys.stdout.write(render_table(headers, rows))
    return 0


# --------------------------------------------------------------------------- explain, docs


def cmd_explain(args: argparse.Namespace) -> int:
    """Print one field's section of the spec reference (every field's path without one)."""
    from mlbench_tui.errors import UsageError
    from mlbench_tui.reference.spec_page import explain, field_names
    from mlbench_tui.spec.diagnostics import did_you_mean

    names = field_names()
    if args.field is None:
        sys.stdout.write("\n".join(names) + "\n")
        return 0
    text = explain(args.field)
    if text is None:
        tails = sorted({n.rsplit(".", 1)[-1] for n in names} | set(names))
        hint = did_you_mean(args.field, tails) or "list them with: mlbench explain"
        raise UsageError(f"no spec field {args.field!r}", hint=hint)
    sys.stdout.write(text)
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    """Write (or with --check compare) the generated reference under --out."""
    from mlbench_tui.commands.data import DESCRIPTIONS
    from mlbench_tui.reference.pages import differences, reference_pages, write_pages

    pages = reference_pages(DESCRIPTIONS)
    if args.check:
        stale = differences(args.out, pages)
        for name in stale:
            print(f"{args.out / name} is not what mlbench docs writes", file=sys.stderr)
        return 1 if stale else 0
    changed = write_pages(args.out, pages)
    print(f"wrote {len(changed)} of {len(pages)} page(s) under {args.out}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- init


def cmd_init(args: argparse.Namespace) -> int:
    """Write a commented spec for a task to stdout or ``--out FILE``."""
    from mlbench_tui.errors import UsageError
    from mlbench_tui.spec.base import DNS1123_LABEL
    from mlbench_tui.spec.templates import spec_template

    task = _resolve_task(args.task)
    if args.name is not None and (len(args.name) > 40 or not DNS1123_LABEL.fullmatch(args.name)):
        raise UsageError(
            f"--name {args.name!r} is not a valid benchmark name",
            hint="use at most 40 lowercase letters, digits and '-' (it prefixes every run name)",
        )
    text = spec_template(task, name=args.name)
    if not args.out:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    if out.exists() and not args.force:
        raise UsageError(f"{out} already exists", hint="use --force to overwrite it")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"wrote {out} (check it with: mlbench validate {out})", file=sys.stderr)
    return 0
