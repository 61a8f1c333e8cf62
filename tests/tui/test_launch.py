"""What launching a spec from the TUI will do and did: the preview apply's own rule gives
(start, skip as unchanged, refuse), and the notification reads what apply reported."""

from __future__ import annotations

from datetime import UTC, datetime

from mlbench_tui.lifecycle import RunState
from mlbench_tui.store.api_models import RunInfo
from mlbench_tui.tui.screens.launch import applied, preview


def run(name: str, digest: str, state: RunState, created: int) -> RunInfo:
    return RunInfo(
        id=f"r-{created:012d}", name=name, spec_name="s", spec_hash=digest, task="1a", backend="gloo",
        workers=1, repeat=0, state=state, target_kind="local", created=datetime.fromtimestamp(created, UTC),
    )  # fmt: skip


def test_the_preview_is_apply_s_decision() -> None:
    plans = [("s-gloo-1w", "h1"), ("s-gloo-2w", "h1")]
    stored = [
        run("s-gloo-1w", "h1", RunState.SUCCEEDED, 1),  # unchanged, succeeded: skipped
        run("s-gloo-2w", "h0", RunState.SUCCEEDED, 2),  # another spec hash: it runs again
        run("s-gloo-2w", "h1", RunState.FAILED, 3),  # failed: it runs again
    ]
    found = preview(plans, stored, None)
    assert (found.outcome, found.starts, found.skipped) == (
        "start",
        ("s-gloo-2w",),
        {"s-gloo-1w": "r-000000000001"},
    )
    assert found.summary() == "1 run(s) start, 1 skipped (unchanged, already succeeded)"
    assert found.action("s-gloo-1w") == "skip: unchanged, already succeeded (r-000000000001)"
    done = preview(plans[:1], stored, None)
    assert (
        done.outcome == "skip" and done.summary() == "nothing starts: every run unchanged, already succeeded"
    )
    refused = preview(plans, stored, "needs 1 GPU but this machine shows no GPU")
    assert refused.outcome == "refuse" and refused.action("s-gloo-2w") == "refused (see above)"


def test_the_notification_says_what_apply_did() -> None:
    both = (
        "plan: 2 run(s)\n"
        "  s-gloo-1w: task 1a, 1 x gloo, val_global_Prec@1 >= 70.0 -- unchanged, already succeeded\n"
        "  s-gloo-2w: task 1a, 2 x gloo, val_global_Prec@1 >= 70.0 -- will run\n"
        "applying in the background (pid 12); its output: /x/apply.log\n"
    )
    assert (
        applied(both, "s.yaml")
        == "apply started 1 run(s) of s.yaml; 1 skipped (unchanged, already succeeded)"
    )
    nothing = (
        "plan: 1 run(s)\n"
        "  s-gloo-1w: task 1a, 1 x gloo, val_global_Prec@1 >= 70.0 -- unchanged, already succeeded\n"
        "nothing to do: every run of this spec already succeeded (use --force to run again)\n"
    )
    assert applied(nothing, "s.yaml").startswith("apply did nothing for s.yaml")
