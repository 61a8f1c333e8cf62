"""Regressed or not, measured: how many repeats ``mlbench compare`` needs to call a known slowdown,
how often it cries wolf on two sets of the same runs, what it costs, and scipy beside it.

1. Real runs: ``--repeats`` runs (6 by default) of a 2-rank logistic regression (task 2a, gloo,
   synthetic data) and as many of the same with rank 1's compute slowed by ``--factor`` (1.1: a
   10% slowdown of the slowed rank's compute), applied in a throw-away ``MLBENCH_HOME``. Then: the
   step-time change the slowdown made, the fewest repeats a side at which ``compare`` calls it
   regressed (and keeps calling it), and the false alarms over A/A pairs of the unslowed runs (one
   run a side, and halves of the repeats).
2. Generated samples of known difference (seeded): runs whose medians scatter 1% run to run and
   whose 200 steps scatter 5%, a 10% slowdown: the repeats needed; 200 A/A pairs of 3 runs a side
   and of one run a side: the false-alarm rate (the goal is 5% at most).
3. Cost on a 1,000-run store (each run with 300 timed steps on each of 2 ranks, results computed
   by the real summariser): the time ``compare`` takes (its reads and its statistics) and what
   ``status`` adds (today's figures of a stored result, its verdicts, step time, pre-flight and
   efficiency lines); the goal is under 0.2 s each. Beside ours, scipy's ``bootstrap`` (the same
   percentile interval of the difference of medians) and ``mannwhitneyu`` on the same samples:
   the intervals and p-values, and the time ratio.

    python -m benchmarks verdicts [--repeats 6] [--factor 1.1] [--skip-runs] [--runs 1000]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "workers")]

from mlbench_tui.results.compare import (  # noqa: E402
    RESAMPLES,
    FigureComparison,
    RunSamples,
    Side,
    compare_figure,
)
from mlbench_tui.results.reference_figures import STEP_TIME  # noqa: E402

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata: {{name: {name}}}
spec:
  task: 2a
  goal: {{metric: val_global_loss, target: 0}}  # never reached: every run takes its epoch
  workers: 2
  backend: gloo
  repeats: {repeats}
  hardware: {{cpu: "1"}}
  data: {{source: synthetic, options: {{train_samples: 8192, val_samples: 256}}}}
  hyperparameters: {{batch_size: 64, max_epochs: 1, timing_warmup_steps: 8}}
{env}"""


def _mlbench(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLBENCH_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args], capture_output=True, text=True, env=env
    )


def _verdict(base: Sequence[RunSamples], cand: Sequence[RunSamples], seed: int = 0) -> FigureComparison:
    return compare_figure(STEP_TIME, Side("base", tuple(base)), Side("cand", tuple(cand)), seed=seed)


def repeats_to_call(base: Sequence[RunSamples], cand: Sequence[RunSamples]) -> int | None:
    """The fewest runs a side from which every larger prefix is called regressed."""
    called = [
        _verdict(base[:k], cand[:k]).verdict == "regressed" for k in range(1, min(len(base), len(cand)) + 1)
    ]
    for k in range(len(called)):
        if all(called[k:]):
            return k + 1
    return None


def false_alarms(runs: Sequence[RunSamples], per_side: int, limit: int = 60) -> tuple[int, int]:
    """A/A pairs of disjoint subsets of ``per_side`` runs: (flagged, pairs)."""
    pairs = []
    for chosen in itertools.combinations(range(len(runs)), 2 * per_side):
        a, b = chosen[:per_side], chosen[per_side:]
        pairs.append(([runs[i] for i in a], [runs[i] for i in b]))
        if len(pairs) >= limit:
            break
    flagged = sum(
        _verdict(a, b, seed=i).verdict != "no significant difference" for i, (a, b) in enumerate(pairs)
    )
    return flagged, len(pairs)


# -- 1. real runs --------------------------------------------------------------------------------


def real_runs(repeats: int, factor: float) -> None:
    from mlbench_tui.runs.compare import select
    from mlbench_tui.store.reader import StoreReader

    print(
        f"1. real runs: {repeats} x 2-rank 2a (gloo), and {repeats} with rank 1's compute slowed {factor:g}x"
    )
    with tempfile.TemporaryDirectory(prefix="mlbench-verdicts-") as tmp:
        home = Path(tmp)
        slow = f'  env: {{MLBENCH_INJECT_FAULT: "rank=1,mode=slow,factor={factor:g}"}}\n'
        (home / "specs").mkdir()
        (home / "specs" / "base.yaml").write_text(SPEC.format(name="aa", repeats=repeats, env=""))
        (home / "specs" / "slow.yaml").write_text(SPEC.format(name="bb", repeats=repeats, env=slow))
        started = time.monotonic()
        applied = _mlbench(home, "apply", "-q", str(home / "specs"))
        print(
            f"   applied {2 * repeats} runs in {time.monotonic() - started:.0f} s (exit {applied.returncode})"
        )
        if applied.returncode != 0:
            print(applied.stderr.strip(), file=sys.stderr)
            return
        _mlbench(home, "status")  # a first writer brings the store to this version's schema
        reader = StoreReader.open(home / "mlbench.db")
        if reader is None:
            print("   no store to read", file=sys.stderr)
            return
        with reader:
            base, cand = select(reader, "aa"), select(reader, "bb")
        for side in (base, cand):
            if side.left_out:
                print(f"   left out of {side.ref}: {', '.join(side.left_out)}")
        a = [_samples(r) for r in base.runs]
        b = [_samples(r) for r in cand.runs]
        whole = _verdict(a, b)
        print(
            f"   step time: base {statistics.median(r.value for r in a):.3g} ms, slowed "
            f"{statistics.median(r.value for r in b):.3g} ms: {whole.change:+.1%} "
            f"(95% CI {whole.low:+.1%} .. {whole.high:+.1%}, {whole.verdict})"
        )
        need = repeats_to_call(a, b)
        print(
            f"   repeats a side to call it regressed: {need if need is not None else f'more than {len(a)}'}"
        )
        print(f"   compare's own estimate: {whole.repeats_needed} a side for 5% at its measured noise")
        for per_side in (1, max(1, len(a) // 2)):
            flagged, pairs = false_alarms(a, per_side)
            if pairs:
                share = f"{flagged} of {pairs} ({flagged / pairs:.0%})"
                print(f"   A/A false alarms, {per_side} run(s) a side: {share}")


def _samples(run: Any) -> RunSamples:
    from mlbench_tui.runs.compare import _samples as samples

    value = run.result.step_time_s * 1000 if run.result.step_time_s else 0.0
    return RunSamples(run.result.name, value, samples(run, STEP_TIME))


# -- 2. generated samples ------------------------------------------------------------------------


def generated(
    n_runs: int, median: float, seed: int, run_noise: float = 0.01, step_noise: float = 0.05
) -> list[RunSamples]:
    rng = random.Random(seed)
    made = []
    for i in range(n_runs):
        centre = median * (1 + rng.gauss(0, run_noise))
        steps = tuple(centre * (1 + rng.gauss(0, step_noise)) for _ in range(200))
        made.append(RunSamples(f"r{i}", statistics.median(steps), steps))
    return made


def simulated() -> None:
    print("\n2. generated samples (run-to-run noise 1%, step noise 5%, 200 steps a run; seeded)")
    needed = []
    for trial in range(10):
        base, slow = generated(8, 100.0, 1000 + trial), generated(8, 110.0, 2000 + trial)
        needed.append(repeats_to_call(base, slow) or 99)
    called = statistics.median(needed)
    print(f"   a 10% slowdown is called regressed from {called:g} run(s) a side (median of 10 trials)")
    for per_side, label in ((3, "3 runs a side (runs resampled)"), (1, "1 run a side (steps resampled)")):
        flagged = 0
        trials = 200
        for trial in range(trials):
            a = generated(per_side, 100.0, 10_000 + trial)
            b = generated(per_side, 100.0, 20_000 + trial)
            flagged += _verdict(a, b, seed=trial).verdict != "no significant difference"
        print(f"   A/A false alarms, {label}: {flagged} of {trials} ({flagged / trials:.1%}; goal <= 5%)")


# -- 3. cost on a 1,000-run store ----------------------------------------------------------------


def build_store(path: Path, runs: int, steps: int = 300) -> list[str]:
    """``runs`` succeeded 2-rank 2a runs in two configurations (every other run slowed 5%), each
    with its timed steps and report windows, results by the real summariser."""
    from mlbench_worker import wire

    from mlbench_tui.lifecycle import RunState
    from mlbench_tui.plan import expand
    from mlbench_tui.results import events as ev
    from mlbench_tui.results.summary import summarize_run
    from mlbench_tui.results.time_to_accuracy import MetricPoint
    from mlbench_tui.spec.loader import validate_data
    from mlbench_tui.store.api_models import RunCreate, RunUpdate
    from mlbench_tui.store.store import Store

    rng = random.Random(7)
    names = []
    with Store(path) as store:
        for i in range(runs):
            name = "cost-a" if i % 2 == 0 else "cost-b"
            body = {"task": "2a", "workers": 2, "backend": "gloo", "data": "synthetic"}
            doc = {"apiVersion": "mlbench/v1", "kind": "Benchmark", "metadata": {"name": name}, "spec": body}
            spec = validate_data(doc)
            (plan,) = expand(spec)
            group = {"commit": f"{name[-1]}{i // 6}"}  # 3 runs of one configuration a label
            create = RunCreate(
                name=plan.name, spec_name=name, spec_hash=plan.spec_hash, task="2a", backend="gloo",
                workers=2,
                goal=plan.goal, plan=plan.model_dump(mode="json"), labels=group,
            )  # fmt: skip
            detail, _ = store.create_run(create)
            points = []
            centre = 0.003 * (1.05 if name == "cost-b" else 1.0) * (1 + rng.gauss(0, 0.01))
            for rank in range(2):
                rows = []
                for step in range(1, steps + 51):
                    value = centre * (1 + rng.gauss(0, 0.05))
                    if step > 50:
                        rows += [
                            (wire.TIMED_STEP, step, 1.0, 0.0, value),
                            (wire.TIMED_STEP_COMM, step, 1.0, 0.0, value / 5),
                        ]
                        points.append(MetricPoint(wire.TIMED_STEP, value, rank, step))
                        points.append(MetricPoint(wire.TIMED_STEP_COMM, value / 5, rank, step))
                    if step % 10 == 0:
                        rows.append((wire.STEP_TIME, step, 1.0, 0.0, value))
                store.ingest_metrics(detail.id, rank, 0, rows)
            stops = [
                ev.record(wire.RunStop(status="success", reason="done", exit_code=0), rank=r)
                for r in range(2)
            ]
            result = summarize_run(plan, RunState.SUCCEEDED, points, stops)
            store.update_run(detail.id, RunUpdate(state=RunState.SUCCEEDED, result=result))
            names.append(detail.id)
    return names


def best_of(fn: Callable[[], object], times: int = 5) -> float:
    took = []
    for _ in range(times):
        started = time.perf_counter()
        fn()
        took.append(time.perf_counter() - started)
    return min(took)


def cost(runs: int) -> None:
    from mlbench_tui.results.table import checks_lines, step_line
    from mlbench_tui.runs.compare import compare_runs, select
    from mlbench_tui.store.reader import StoreReader

    print(f"\n3. cost on a {runs:,}-run store")
    with tempfile.TemporaryDirectory(prefix="mlbench-verdicts-store-") as tmp:
        path = Path(tmp) / "mlbench.db"
        started = time.monotonic()
        ids = build_store(path, runs)
        print(f"   built in {time.monotonic() - started:.0f} s ({runs * 2 * 350:,} timed steps and windows)")
        reader = StoreReader.open(path)
        assert reader is not None
        with reader:
            a_id, b_id = ids[-2], ids[-1]
            labels = (f"label:commit=a{(runs - 2) // 6}", f"label:commit=b{(runs - 1) // 6}")
            pair_s = best_of(lambda: compare_runs(select(reader, a_id), select(reader, b_id)))
            group_s = best_of(lambda: compare_runs(select(reader, labels[0]), select(reader, labels[1])))
            run = reader.get_run(a_id)

            def added() -> None:
                result = run.known_result()
                step_line(result)
                checks_lines(result)

            status_s = best_of(added)
        print(f"   compare RUN RUN (its reads and statistics): {pair_s * 1000:.0f} ms (goal < 200 ms)")
        print(f"   compare {labels[0]} {labels[1]} (3 runs a side): {group_s * 1000:.0f} ms")
        print(f"   what status adds (figures, step, verdict, pre-flight lines): {status_s * 1000:.1f} ms")


def peer() -> None:
    """Ours beside scipy on 8 runs a side (run medians, 1% noise, 3% apart; seeded)."""
    import numpy as np
    from scipy import stats

    print("\n4. beside scipy: 8 runs a side, 3% apart")
    base, cand = generated(8, 100.0, 31), generated(8, 103.0, 32)
    found = _verdict(base, cand)
    x = np.asarray([r.value for r in base])
    y = np.asarray([r.value for r in cand])

    def ratio(p: np.ndarray, q: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(q, axis=axis) / np.median(p, axis=axis) - 1

    def theirs() -> Any:
        return stats.bootstrap(
            (x, y), ratio, n_resamples=RESAMPLES, method="percentile", vectorized=True, random_state=0
        )

    ci = theirs().confidence_interval
    mw = stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic", use_continuity=True).pvalue
    print(
        f"   ours:  {found.change:+.2%}, 95% CI {found.low:+.2%} .. {found.high:+.2%}, "
        f"Mann-Whitney p={found.mann_whitney_p:.4g}"
    )
    print(
        f"   scipy: {float(ratio(x, y)):+.2%}, 95% CI {ci.low:+.2%} .. {ci.high:+.2%}, "
        f"mannwhitneyu p={mw:.4g}"
    )
    ours_s, theirs_s = best_of(lambda: _verdict(base, cand)), best_of(theirs)
    print(f"   time: ours {ours_s * 1000:.1f} ms (bootstrap and Mann-Whitney), "
          f"scipy {theirs_s * 1000:.1f} ms "
          f"(bootstrap alone): {ours_s / theirs_s:.2f}x")  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks verdicts", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=6, help="real runs a configuration (default 6)")
    parser.add_argument(
        "--factor", type=float, default=1.1, help="the slowed rank's compute factor (default 1.1)"
    )
    parser.add_argument("--skip-runs", action="store_true", help="leave out part 1 (the real runs)")
    parser.add_argument("--runs", type=int, default=1000, help="runs in the cost store (default 1000)")
    args = parser.parse_args(argv)
    if not args.skip_runs:
        real_runs(max(2, args.repeats), args.factor)
    simulated()
    cost(args.runs)
    peer()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
