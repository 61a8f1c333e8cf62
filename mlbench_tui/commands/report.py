"""``mlbench report``: figures and an offline HTML page from stored results (nothing is re-run)."""

from __future__ import annotations

import argparse
import sys
from contextlib import closing
from pathlib import Path

from mlbench_tui.commands.usage import documented

FORMATS = ("html", "png", "svg")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``report`` to the ``mlbench`` parser."""
    p = sub.add_parser(
        "report",
        help="write an offline HTML report (or PNG/SVG figures) of runs' stored results",
        description="Scaling (time to accuracy, speedup, efficiency, compute/communication split per "
        "worker count), all-reduce curves (task 0a) and per-run training curves, drawn with matplotlib "
        "from the store. Choose a spec's runs (a spec file or directory, or a spec name), single runs "
        "(id or name), or leave REF out for every finished run in the store. PNG and SVG figures are "
        "sized for their panels unless --width/--height say otherwise, and carry the notes the page "
        "shows under them.",
        **documented("report"),
    )
    p.add_argument("refs", nargs="*", metavar="SPEC|RUN|DIR", help="spec file/directory/name, or run id/name")
    p.add_argument(
        "-o",
        "--output",
        "--format",
        dest="format",
        choices=FORMATS,
        default="html",
        help="output format: html (one self-contained page, the default) or png/svg figure files",
    )
    p.add_argument(
        "--out",
        "--out-dir",
        dest="out",
        type=Path,
        default=None,
        metavar="PATH",
        help="the HTML file (default report.html), or the folder of png/svg files (default report-figures)",
    )
    p.add_argument(
        "--width", type=_pixels, metavar="PX", help="figure width in pixels (png/svg; default: by panels)"
    )
    p.add_argument(
        "--height", type=_pixels, metavar="PX", help="figure height in pixels (png/svg; default: by panels)"
    )
    p.set_defaults(handler=cmd_report)


def _pixels(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of pixels, got {text!r}") from None
    if not 100 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"expected 100 to 10000 pixels, got {value}")
    return value


def cmd_report(args: argparse.Namespace) -> int:
    from mlbench_tui.report.renderer import Renderer

    # First: the renderer's processes import matplotlib while this one imports the rest and reads.
    with Renderer() as renderer:
        from mlbench_tui.report.build import write_figures, write_report
        from mlbench_tui.runs.results import report_run_ids
        from mlbench_tui.server.daemon import run_reader

        with closing(run_reader()) as reader:
            run_ids = report_run_ids(reader, args.refs)
            if args.format == "html":
                out = args.out or Path("report.html")
                written = write_report(reader, run_ids, out, renderer=renderer)
            else:
                out = args.out or Path("report-figures")
                size = {"width": args.width, "height": args.height}
                written = write_figures(reader, run_ids, out, args.format, renderer=renderer, **size)
    where = written.paths[0] if args.format == "html" else out
    print(f"wrote {where} ({written.runs} runs, {written.figures} figures)", file=sys.stderr)
    return 0
