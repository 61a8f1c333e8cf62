"""Validating a large sweep, side by side: ``python -m benchmarks spec_sweep [--repeat 5]``.

Goal (issue 36): ``validate`` of a sweep of 784,000 runs (1,960 world sizes x 2 backends x 2
frameworks x 100 repeats) in under 1 s. Ours is the loader as ``mlbench validate`` calls it:
the runs counted without expanding them, every world size's scaled hyperparameters checked, and
the sweep refused over the cap (the default) or accepted (``--max-runs 784000``). The peer is
what validate did before: load, then count the runs by expanding every plan (``len(expand())``).
The peer runs on a twentieth of the world sizes (39,200 plans) and is scaled to the whole sweep
(expand is linear in the runs; ``--full-peer`` expands all 784,000 instead, minutes).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

WORLD_SIZES = 1960


def _spec(world_sizes: int) -> str:
    workers = ", ".join(str(i) for i in range(1, world_sizes + 1))
    return (
        "apiVersion: mlbench/v1\nkind: Benchmark\nmetadata: {name: huge}\n"
        "spec:\n  task: 1a\n  data: synthetic\n  hardware: {gpu: 1}\n  backend: [gloo, nccl]\n"
        f"  framework: [pytorch, tensorflow]\n  repeats: 100\n  workers: [{workers}]\n"
    )


def _median(fn: object, repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``fn()`` over ``repeat`` calls."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()  # type: ignore[operator]
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main(argv: list[str] | None = None) -> int:
    from mlbench_tui.plan import expand
    from mlbench_tui.spec.loader import collect_paths

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--full-peer", action="store_true", help="expand all 784,000 plans for the peer")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        whole = Path(folder) / "huge.yaml"
        whole.write_text(_spec(WORLD_SIZES))
        part_sizes = WORLD_SIZES if args.full_peer else WORLD_SIZES // 20
        part = Path(folder) / "part.yaml"
        part.write_text(_spec(part_sizes))
        collect_paths([part], max_runs=10**7)  # imports and caches warm

        (loaded,), _ = collect_paths([whole], max_runs=10**7)
        runs = loaded.spec.run_count()
        refused = _median(lambda: collect_paths([whole]), args.repeat)
        accepted = _median(lambda: collect_paths([whole], max_runs=runs), args.repeat)

        def peer() -> int:
            (item,), _ = collect_paths([part], max_runs=10**7)
            return len(expand(item.spec))

        peer_runs = peer()
        peer_wall, peer_cpu = _median(peer, 1 if args.full_peer else max(1, args.repeat // 2))
    scale = runs / peer_runs
    print(f"spec_sweep: validate of a {runs:,}-run sweep ({WORLD_SIZES} world sizes x 2 x 2 x 100 repeats)")
    print(f"{'':38} {'wall s':>9} {'cpu s':>9}")
    print(f"{'ours: refused over the cap (default)':38} {refused[0]:>9.3f} {refused[1]:>9.3f}")
    print(f"{'ours: accepted (--max-runs 784000)':38} {accepted[0]:>9.3f} {accepted[1]:>9.3f}")
    label = f"peer: len(expand()) of {peer_runs:,} runs"
    print(f"{label:38} {peer_wall:>9.3f} {peer_cpu:>9.3f}")
    if scale != 1:
        print(f"{'peer scaled to the whole sweep':38} {peer_wall * scale:>9.1f} {peer_cpu * scale:>9.1f}")
    print(f"ratio (peer / ours accepted, cpu): {peer_cpu * scale / accepted[1]:,.0f}x; goal: ours under 1 s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
