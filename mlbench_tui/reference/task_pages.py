"""One page per official task (``docs/tasks/<id>.md``, ``mlbench tasks TASK``) and their index.

A page says what the task trains and on what, its goals, how to get its dataset, how it may run
(backends, precisions, frameworks, CUDA graphs), each hyperparameter with its official value,
bounds and policy (which a spec may change), and MLBench's published results for it. It is built
from the catalog (``spec.tasks``), the hyperparameters' knobs and the published baselines, so a
task added to the catalog gets its page with no other edit.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from collections.abc import Mapping
from typing import Any

from mlbench_tui.report.anchors import anchors_for, published_for
from mlbench_tui.spec.tasks import TASKS, TaskInfo

POLICY_WORDS = {
    "override": "a spec may set it",
    "fixed": "fixed (the official value)",
    "derived": "set by the plan from other values",
    "tuning": "an implementation knob",
}
DATASET_TASK = re.compile(r"^task (\w+):\s*")  # a dataset's description names its task first


def _op(direction: str) -> str:
    return ">=" if direction == "max" else "<="


def precisions_text(task: TaskInfo) -> str:
    """The precisions a spec may train in; for a sweep of element types (0a), those too, since
    they are a hyperparameter rather than ``hardware.precision``."""
    text = ", ".join(task.precisions)
    dtypes = task.defaults.get("dtypes")
    if isinstance(dtypes, list):
        swept = ", ".join(map(str, dtypes))
        text += f" (hardware.precision; it measures the element types in hyperparameters.dtypes: {swept})"
    return text


def precisions_short(task: TaskInfo) -> str:
    """``fp32, bf16``; for a sweep of element types ``fp32; measures fp32, fp16``."""
    text = ", ".join(task.precisions)
    dtypes = task.defaults.get("dtypes")
    return f"{text}; measures {', '.join(map(str, dtypes))}" if isinstance(dtypes, list) else text


def task_datasets(task: TaskInfo, datasets: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(name, description)`` of the datasets ``mlbench data prepare`` makes for ``task``."""
    found = []
    for name, description in sorted(datasets.items()):
        match = DATASET_TASK.match(description)
        if match and match.group(1) == task.id:
            found.append((name, description[match.end() :]))
    return found


def _bounds(task: TaskInfo, key: str) -> str:
    knob = task.knobs[key]
    choices = task.choices.get(key)
    if choices:
        return ", ".join(f"`{c}`" for c in choices)
    from mlbench_worker.knobs import show_bound

    bounds = [
        f"{op} {show_bound(value)}"
        for op, value in ((">=", knob.ge), (">", knob.gt), ("<=", knob.le), ("<", knob.lt))
        if value is not None
    ]
    return ", ".join(bounds) or "-"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def hyperparameter_table(task: TaskInfo) -> str:
    rows = [
        "| hyperparameter | default | who sets it | bounds or choices | closed division | what it is |",
        "|---|---|---|---|---|---|",
    ]
    for key, value in task.defaults.items():
        knob = task.knobs[key]
        rows.append(
            f"| `{key}` | `{_cell(json.dumps(value))}` | {POLICY_WORDS.get(knob.policy, knob.policy)} | "
            f"{_cell(_bounds(task, key))} | {'official value' if knob.in_closed_division else 'free'} | "
            f"{_cell(knob.description)} |"
        )
    return "\n".join(rows)


def data_option_rows(cls: type[Any]) -> list[tuple[str, Any, Any, str]]:
    """Each data option of ``cls``: name, default, its knob, and its bounds (or choices) as text."""
    from mlbench_worker.knobs import field_types, knobs, show_bound

    out = []
    types = field_types(cls)
    for field in dataclasses.fields(cls):
        option = knobs(cls)[field.name]
        if typing.get_origin(types[field.name]) is typing.Literal:
            out.append((field.name, field.default, option, ", ".join(typing.get_args(types[field.name]))))
            continue
        bounds = ", ".join(
            f"{op} {show_bound(v)}"
            for op, v in ((">=", option.ge), (">", option.gt), ("<=", option.le), ("<", option.lt))
            if v is not None
        )
        out.append((field.name, field.default, option, bounds))
    return out


def data_options_lines(task: TaskInfo) -> list[str]:
    """A table of ``data.options`` per data source (typed; unknown names are refused)."""
    lines: list[str] = []
    for source, cls in task.data_options.items():
        lines += [
            "",
            f"`data: {{source: {source}, options: {{...}}}}` takes:",
            "",
            "| option | default | bounds or choices | what it is |",
            "|---|---|---|---|",
        ]
        for name, default, option, bounds in data_option_rows(cls):
            default_text = _cell(json.dumps(default))
            lines.append(
                f"| `{name}` | `{default_text}` | {_cell(bounds) or '-'} | {_cell(option.description)} |"
            )
    return lines


def _goal_lines(task: TaskInfo) -> list[str]:
    goal = task.goal
    if goal is None:
        return ["None: a measurement sweep; it has no goal to reach and its runs have no time to accuracy."]
    metric, op = goal.metric, _op(goal.direction)
    return [
        f"- `goal: full` (the default): `{metric}` {op} {goal.full:g}, MLBench's official target.",
        f"- `goal: light`: `{metric}` {op} {goal.light:g}, a relaxed target for quick runs; its results "
        "are not comparable with full-goal results (the report says which goal each point is on).",
        "- or your own: `goal: {metric: ..., target: ..., direction: max|min}`.",
        "",
        "The goal is checked on the global (all-reduced) validation metric after each evaluation; "
        "every rank stops together once it is reached. Time to accuracy is training time only "
        "(validation excluded).",
    ]


def _data_lines(task: TaskInfo, datasets: Mapping[str, str]) -> list[str]:
    if not task.reads_data:
        return ["The task generates its inputs (`data: synthetic`); there is nothing to download."]
    lines = [f"{task.dataset}.", ""]
    prepared = task_datasets(task, datasets)
    for name, description in prepared:
        lines.append(f"- `mlbench data prepare {name}`: {description}; then `data: download` (the cache) "
                     f"or `data: {{source: path, path: DIR}}` with `--dir DIR`.")  # fmt: skip
    if not prepared:
        lines.append("- `data: {source: path, path: DIR}`: a directory prepared in the task's format.")
    synthetic = "- `data: synthetic`: generated, learnable data in the same format, for smoke runs"
    if task.synthetic_sizes:
        sizes = ", ".join(f"`{s}`" for s in task.synthetic_sizes)
        synthetic += f" (its `data.options` may shrink the model: {sizes})"
    lines.append(synthetic + ".")
    return lines


def _baseline_lines(task: TaskInfo) -> list[str]:
    lines = [f"- {anchor.description}." for anchor in anchors_for(task.id)]
    lines += [f"- {p.description}." for kind in ("loss", "cost") for p in published_for(task.id, kind)]
    return lines or ["MLBench published no result for this task."]


def task_page(task: TaskInfo, datasets: Mapping[str, str]) -> str:
    """The task's page, as Markdown (what ``mlbench tasks TASK`` prints)."""
    graphs = (
        f"no: {task.no_cuda_graphs}"
        if task.no_cuda_graphs
        else "yes (`implementation: {cuda_graphs: true}`, backend nccl)"
    )
    lines = [
        f"# Task {task.id}: {task.title}",
        "",
        f"`task: {task.id}` or `task: {task.name}`. Model: {task.model}.",
        "",
        "## Goal",
        "",
        *_goal_lines(task),
        "",
        "## Dataset",
        "",
        *_data_lines(task, datasets),
        *data_options_lines(task),
        "",
        "## How it runs",
        "",
        f"- backends: {', '.join(task.backends)}",
        f"- precisions: {precisions_text(task)}",
        f"- frameworks: {', '.join(task.frameworks)}",
        f"- learning rate with workers: {task.lr_scaling}",
        f"- CUDA graphs: {graphs}",
        f"- batch size counts: {task.batch_unit}",
        "",
        task.notes,
        "",
        "## Hyperparameters",
        "",
        "Declared once, in `workers/mlbench_worker/hyperparams.py`. A spec may override only what "
        "the task's policy allows (`spec.hyperparameters`), so results stay comparable; MLPerf's "
        "closed division needs the official value of the rest.",
        "",
        hyperparameter_table(task),
        "",
        "## MLBench's published results",
        "",
        *_baseline_lines(task),
    ]
    return "\n".join(lines).rstrip() + "\n"


def tasks_index() -> str:
    """The index of task pages, with each task's goals and what it runs on."""
    rows = [
        "| task | name | model | dataset | goal metric | full | light | backends | precisions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t in TASKS.values():
        g = t.goal
        rows.append(
            f"| [{t.id}]({t.id}.md) | {t.name} | {_cell(t.model.split(' (')[0])} | "
            f"{_cell(t.dataset.split(' (')[0])} | "
            + (
                f"`{g.metric}` | {_op(g.direction)} {g.full:g} | {_op(g.direction)} {g.light:g}"
                if g
                else "- | - | -"
            )
            + f" | {', '.join(t.backends)} | {_cell(precisions_short(t))} |"
        )
    return (
        "# Official tasks\n\nMLBench's official tasks, each with fixed hyperparameters and a "
        "time-to-accuracy goal (`mlbench tasks TASK` prints a page in the terminal):\n\n"
        + "\n".join(rows)
        + "\n"
    )
