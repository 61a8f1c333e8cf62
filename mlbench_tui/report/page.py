"""The report as one self-contained HTML page: a header (specs with their hashes, the runs and
their outcomes, the environment fingerprints) and the figures, embedded as base64 PNG, each with
what it measures. No script, stylesheet, font or image is fetched when the page opens.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from mlbench_tui import __version__
from mlbench_tui.formatting import format_duration
from mlbench_tui.report.configs import CAPTION as TIME_CAPTION
from mlbench_tui.report.configs import time_rows
from mlbench_tui.report.environment import environment_section
from mlbench_tui.report.figure import Figure
from mlbench_tui.report.inputs import RunRecord, training
from mlbench_tui.report.scaling import outcome
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.reference import verdicts
from mlbench_tui.results.table import checks_lines, reference_text

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1280px;
       padding: 0 1.5em; color: #1a1a1a; background: #fff; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
.meta { color: #555; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: 13px; }
th, td { text-align: left; padding: .25em .7em; border-bottom: 1px solid #eee; vertical-align: top; }
th { background: #f5f5f5; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.bad { color: #b71c1c; font-weight: 600; } .ok { color: #1b5e20; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #333; max-width: 70em; } figcaption ul { margin: .3em 0; color: #444; }
pre { background: #f7f7f7; padding: .7em; overflow-x: auto; font-size: 12px; }
code { font-size: 12px; }
th, td { white-space: nowrap; } td.ok, td.bad, td.names, td.long { white-space: normal; }
td.names { min-width: 16em; } td.long { min-width: 20em; }
details summary { cursor: pointer; } details pre { white-space: pre-wrap; max-width: 60em; }
.wide { overflow-x: auto; }
p.caption { color: #333; max-width: 70em; }
"""
OUTCOME_WIDTH = 90  # characters of an outcome shown before the rest folds away


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _seconds(value: float | None) -> str:
    return format_duration(value, unknown="-")


def outcome_cell(text: str, ok: bool) -> str:
    """An outcome on one line; a longer one (a whole CUDA error) folds the rest into a <details>."""
    first = text.splitlines()[0] if text else ""
    cls = "ok" if ok else "bad"
    if first == text and len(text) <= OUTCOME_WIDTH:
        return f"<td class={cls}>{_e(text)}</td>"
    short = first if len(first) <= OUTCOME_WIDTH else first[: OUTCOME_WIDTH - 1] + "\u2026"
    return f"<td class={cls}><details><summary>{_e(short)}</summary><pre>{_e(text)}</pre></details></td>"


def checks_cell(result: RunResult) -> str:
    """The run's checks on one line (its verdicts against the machine's reference, how many figures
    are suspect), with every line of them (the start, each verdict, each suspect and why) folded
    into a <details>."""
    lines = checks_lines(result)
    if not lines:
        return "<td>-</td>"
    suspects = len(result.suspects)
    short = f"! {suspects} suspect" if suspects else reference_text(result)
    if short == "-":
        short = "start, verdicts"
    cls = " class=bad" if suspects or any(v.flagged for v in verdicts(result)) else ""
    body = "\n".join(f"{label}: {text}" for label, text in lines)
    return f"<td{cls}><details><summary>{_e(short)}</summary><pre>{_e(body)}</pre></details></td>"


def runs_table(records: Sequence[RunRecord]) -> str:
    rows = []
    for record in records:
        r = record.result
        why = outcome(r)
        if r.goal is None:
            shown = "sweep recorded" if why is None else why
        elif why is None:
            shown = f"reached in {_seconds(r.time_to_accuracy_s)}"
        else:
            shown = why
        rows.append(
            f"<tr><td class=name>{_e(r.name)}</td><td>{_e(r.task_name or r.task)}</td>"
            f"<td>{_e(r.framework)}</td><td>{_e(r.backend)}</td>"
            f"<td class=num>{r.workers}</td><td class=num>{r.repeat}</td>"
            f"<td>{_e(r.state.value)}</td>{outcome_cell(shown, why is None)}"
            f"<td class=num>{_seconds(r.wall_time_s)}</td>{checks_cell(r)}"
            f"<td class=name><code>{_e(record.run_id)}</code></td></tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "run",
            "task",
            "framework",
            "backend",
            "workers",
            "repeat",
            "state",
            "outcome",
            "wall",
            "checks",
            "id",
        )
    )
    return f"<div class=wide><table><tr>{head}</tr>{''.join(rows)}</table></div>"


def specs_section(records: Sequence[RunRecord]) -> str:
    specs: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for record in records:
        key = (record.result.spec_name, record.result.spec_hash)
        text, names = specs.setdefault(key, (record.spec_text, []))
        names.append(record.result.name)
    parts = []
    for (name, digest), (text, names) in sorted(specs.items()):
        parts.append(
            f"<h3>{_e(name)}</h3><p class=meta>spec hash <code>{_e(digest)}</code>, {len(names)} run(s)</p>"
            f"<details><summary>spec</summary><pre>{_e(text)}</pre></details>"
        )
    return "".join(parts)


def figure_block(figure: Figure, png: bytes | None) -> str:
    """A figure with its notes (its caption is its section's, written once above it); one with
    nothing to draw (``png`` None) is its title and the notes saying why."""
    notes = "".join(f"<li>{_e(n)}</li>" for n in figure.notes)
    if png is None:
        return f'<figure id="{_e(figure.key)}"><h3>{_e(figure.title)}</h3><ul>{notes}</ul></figure>'
    data = base64.b64encode(png).decode("ascii")
    caption = f"<figcaption><ul>{notes}</ul></figcaption>" if notes else ""
    return (
        f'<figure id="{_e(figure.key)}"><img alt="{_e(figure.title)}" src="data:image/png;base64,{data}">'
        f"{caption}</figure>"
    )


def time_table(records: Sequence[RunRecord]) -> str:
    """The time-to-accuracy table of specs that ran one worker count ('' when there are none)."""
    rows = time_rows(training(records))
    if not rows:
        return ""
    head = "".join(
        f"<th>{h}</th>"
        for h in ("spec", "task", "goal", "configuration", "runs", "time to accuracy", "capture", "step",
                  "comm", "published baseline")
    )  # fmt: skip
    body = ""
    for r in rows:
        cells = [f"<td>{_e(v)}</td>" for v in (r.spec, r.task, r.goal, r.configuration)]
        left_out = f"<br>left out: {_e(r.left_out)}" if r.left_out else ""
        cells.append(f"<td class=long>{_e(r.runs)}{left_out}</td>")
        cells.append(f"<td class='num {'ok' if r.reached else 'bad'}'>{_e(r.time_to_accuracy)}</td>")
        cells += [f"<td class=num>{_e(v)}</td>" for v in (r.capture, r.step, r.communication)]
        body += f"<tr>{''.join(cells)}<td class=long>{_e(r.baseline)}</td></tr>"
    return (
        f'<h2 id="time-to-accuracy">Time to accuracy</h2><p class=caption>{_e(TIME_CAPTION)}</p>'
        f"<div class=wide><table><tr>{head}</tr>{body}</table></div>"
    )


def render_page(
    records: Sequence[RunRecord], figures: Sequence[Figure], images: Mapping[str, bytes], *, title: str
) -> str:
    """The whole page; ``images`` maps each figure's key to its PNG. Each kind of figure's caption
    is written once, above the first figure of its kind."""
    sections: dict[str, list[str]] = {}
    written: set[str] = set()
    for figure in figures:
        blocks = sections.setdefault(figure.section or "Figures", [])
        if figure.caption and figure.caption not in written and figure.key in images:
            written.add(figure.caption)
            blocks.append(f"<p class=caption>{_e(figure.caption)}</p>")
        blocks.append(figure_block(figure, images.get(figure.key)))
    table = time_table(records)
    body = table + "".join(f"<h2>{_e(name)}</h2>{''.join(blocks)}" for name, blocks in sections.items())
    contents = (
        '<li><a href="#time-to-accuracy">Time to accuracy (one worker count per spec)</a></li>'
        if table
        else ""
    )
    contents += "".join(f'<li><a href="#{_e(f.key)}">{_e(f.title)}</a></li>' for f in figures)
    failed = sum(1 for r in records if outcome(r.result) is not None)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{_e(title)}</h1><p class=meta>{len(records)} run(s), {failed} without a result"
        f" &middot; made by mlbench {_e(__version__)} on {stamp} from the stored results (nothing re-run)</p>"
        f"<h2>Contents</h2><ol>{contents}</ol>"
        f"<h2>Runs</h2>{runs_table(records)}<h2>Specs</h2>{specs_section(records)}"
        f"<h2>Environment</h2>{environment_section(records)}{body}</body></html>"
    )
