"""The user's commands on runs: launch a spec, cancel, delete, rerun; shared by every screen.

Each runs in a thread worker through ``in_background`` (after a confirmation modal, which the
caller or these functions show) and reports back with ``CommandFinished`` (a notification), so
the UI never blocks on a subprocess or request.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from mlbench_tui.tui.messages import CommandFinished
from mlbench_tui.tui.screens.confirm import ConfirmScreen
from mlbench_tui.tui.shell import Shell

ACTIVE = ("running", "pending")


def in_background(app: Shell, what: str, job: Callable[[], str]) -> None:
    """Run ``job`` in a thread worker; its message becomes a notification, then the screens
    refresh (its error goes to the app's worker-error handler)."""

    def run() -> None:
        message = job()
        app.post_message(CommandFinished(what, message))
        app.call_from_thread(app.action_refresh_now)

    app.run_worker(run, name=what, thread=True, group="commands", exit_on_error=False)


def launch(app: Shell, path: Path, *, force: bool = False) -> None:
    """``mlbench apply PATH --detach`` (``--force``): start the runs of a spec file or directory;
    the notification says what apply did (started, skipped as unchanged)."""
    from mlbench_tui.tui.screens.launch import applied

    def job() -> str:
        result = app.launcher.apply(path, force=force)
        return applied(result.stdout + result.stderr, path.name)

    app.notify(f"applying {path} …", timeout=3)
    in_background(app, "launch", job)


def cancel_run(app: Shell, run_id: str, name: str, state: str) -> None:
    if state not in ACTIVE:
        app.notify(f"{name} is {state}: nothing to cancel", severity="warning")
        return

    def job() -> str:
        app.launcher.cancel(run_id)
        return f"cancelled {name}"

    def answer(yes: bool | None) -> None:
        if yes:
            in_background(app, "cancel", job)

    app.push_screen(ConfirmScreen(f"Cancel run {name}?", "Every rank is stopped.", yes="Cancel run"), answer)


def delete_run(app: Shell, run_id: str, name: str, state: str) -> None:
    detail = "Its metrics, logs and events are deleted from the store."
    if state in ACTIVE:
        detail += " The run is still going: it is cancelled first."

    def job() -> str:
        if state in ACTIVE:
            app.launcher.cancel(run_id)
        app.client.delete_run(run_id)
        return f"deleted {name}"

    def answer(yes: bool | None) -> None:
        if yes:
            in_background(app, "delete", job)

    app.push_screen(ConfirmScreen(f"Delete run {name}?", detail, yes="Delete"), answer)


def _rerun_job(app: Shell, run_id: str, name: str) -> str:
    from mlbench_tui.settings import Paths

    detail = app.client.get_run(run_id)
    app.launcher.rerun(name, detail.spec_text, Paths.from_env().state_dir / "tui")
    return f"launched the spec of {name} again"


def rerun(app: Shell, run_id: str, name: str) -> None:
    def answer(yes: bool | None) -> None:
        if yes:
            in_background(app, "rerun", partial(_rerun_job, app, run_id, name))

    app.push_screen(
        ConfirmScreen(
            f"Run the spec of {name} again?", "Its stored spec is applied again (--force).", yes="Rerun"
        ),
        answer,
    )
