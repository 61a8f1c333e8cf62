"""Coverage-guided fuzzing of the spec gate with atheris (libFuzzer for Python), a fixed number of
inputs: ``python -m benchmarks spec_fuzz [--runs 10000] [--seed 1] [--max-len 4096]``.

Not a test (it runs minutes, not seconds). Each input is a spec file's bytes. The loader must
return specs or located problems and raise nothing; every spec it accepts must expand into plans
whose worker configs the ranks' own parser accepts and whose dry runs render (local, Kubernetes
and Slurm), which is the promise "what validate accepts, every later step accepts". Anything else
is a finding: its kind, message and input are written under ``--out`` and counted, and fuzzing
goes on, so one run reports every kind it met. The seed corpus is the committed specs, the
templates of every task and the bad-spec fixtures.

libFuzzer runs in a child process (it ends the process when the runs are done); the parent prints
the inputs run, the coverage reached, the throughput and the findings. Needs the ``fuzz`` extra:
``pip install 'mlbench-tui[fuzz]'`` (atheris ships Linux wheels for CPython 3.11).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from mlbench_worker import wire

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (ROOT / "specs", ROOT / "tests" / "fixtures" / "bad_specs")


def _corpus(folder: Path) -> int:
    """Write the seed inputs into ``folder``; returns how many."""
    from mlbench_tui.spec.tasks import TASKS
    from mlbench_tui.spec.templates import spec_template

    count = 0
    for source in SEEDS:
        for path in sorted(source.glob("*.yaml")):
            if path.stat().st_size <= 64 * 1024:
                (folder / f"seed-{count:04d}.yaml").write_bytes(path.read_bytes())
                count += 1
    for task in TASKS.values():
        (folder / f"seed-{count:04d}.yaml").write_text(spec_template(task))
        count += 1
    return count


TOKENS = (
    "apiVersion: mlbench/v1", "kind: Benchmark", "metadata:", "spec:", "name: ", "task: ", "workers: ",
    "backend: ", "framework: ", "goal: ", "target: ", "kind: kubernetes", "kind: slurm", "image: ",
    "extra_args: ", "data: ", "source: synthetic", "options: ", "hyperparameters: ", "env: ",
    "env_loading_code: ", "hardware: ", "gpu: ", "memory: ", "cpu: ", "repeats: ", "seed: ",
    "max_time: ", "metric: ", "target: ", "direction: ", "<<: ", "&a ", "*a", "!!str ", "!!int ",
    "!!python/object ", "%YAML 1.1", "---", "${X}", "LD_PRELOAD: ", "MLBENCH_INJECT_FAULT: ",
    "rank=1,step=2", "--hold", wire.VAL_GLOBAL_PREC1, "1e400", ".nan", "99999999999999999999",
    "a\u202eb", "t\u0430sk", "\u200b",
)  # fmt: skip
"""Words of the spec language and of YAML, as libFuzzer's dictionary: mutations splice them in."""


def _dictionary(path: Path) -> Path:
    """libFuzzer's dictionary format: one quoted entry per line, other than printable ASCII as \\xNN."""

    def quoted(token: str) -> str:
        data = token.encode()
        return (
            '"'
            + "".join(chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\x{b:02x}" for b in data)
            + '"'
        )

    path.write_text("".join(quoted(token) + "\n" for token in TOKENS))
    return path


def _child(argv: list[str]) -> None:
    import atheris

    out = Path(os.environ["SPEC_FUZZ_OUT"])
    with atheris.instrument_imports(include=["mlbench_tui", "mlbench_worker", "ruamel.yaml"]):
        from mlbench_worker.config import parse_config

        from mlbench_tui.plan import expand, worker_config
        from mlbench_tui.runs.plans import PlannedRun, dry_run_text
        from mlbench_tui.spec.loader import collect_bytes, set_issues

    seen: set[str] = set()

    def record(kind: str, data: bytes, detail: str) -> None:
        """One finding: counted by kind and place; the first input of each is kept."""
        _type, exc, tb = sys.exc_info()
        where = traceback.extract_tb(tb)[-1] if tb else None
        place = f"{Path(where.filename).name}:{where.lineno}" if where else detail[:60]
        key = f"{kind}: {type(exc).__name__ if exc else 'check'} at {place}"
        with open(out / "findings.jsonl", "a") as log:
            log.write(json.dumps({"key": key, "detail": (repr(exc) if exc else detail)[:500]}) + "\n")
        if key not in seen:
            seen.add(key)
            (out / f"finding-{len(seen):03d}.yaml").write_bytes(data)
            (out / f"finding-{len(seen):03d}.txt").write_text(traceback.format_exc() if exc else detail)

    def one_input(data: bytes) -> None:
        try:
            loaded, issues = collect_bytes(data, "fuzz.yaml", environ={})
            issues = [*issues, *set_issues(loaded)]
        except Exception:
            record("the loader raised", data, "")
            return
        for issue in issues:
            if "\n" in issue.render() or issue.line < 1 or issue.col < 1:
                record("a problem not on its own line", data, issue.render())
        if issues:
            return
        try:
            plans = [plan for item in loaded for plan in expand(item.spec)]
            for plan in plans:
                parse_config(json.loads(json.dumps(worker_config(plan, "r-fuzz"))))
            planned = [PlannedRun(plan=plan, spec_text="", source="fuzz.yaml") for plan in plans[:8]]
            # as apply's: its local server answers on a Unix socket too (ranks on emulated links use it)
            dry_run_text(planned, "http://127.0.0.1:8765", "/run/mlbench-fuzz/server.sock")
        except Exception:
            record("an accepted spec failed later", data, "")

    atheris.Setup([sys.argv[0], *argv], one_input)
    atheris.Fuzz()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="inputs to run (default 10000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-len", type=int, default=4096, help="longest input in bytes")
    parser.add_argument("--out", type=Path, help="findings folder (default: a temporary one)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.child:
        _child(rest)
        return 0
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("error: atheris is not installed: pip install 'mlbench-tui[fuzz]'", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="spec-fuzz-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as corpus, tempfile.TemporaryDirectory() as scratch:
        seeds = _corpus(Path(corpus))
        libfuzzer = [
            f"-dict={_dictionary(Path(scratch) / 'spec.dict')}",
            f"-runs={args.runs}",
            f"-seed={args.seed}",
            f"-max_len={args.max_len}",
            "-rss_limit_mb=4096",
            "-timeout=30",
            "-print_final_stats=1",
            corpus,
        ]
        env = {**os.environ, "SPEC_FUZZ_OUT": str(out), "MLBENCH_HOME": str(Path(scratch) / "home")}
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.spec_fuzz", "--child", *libfuzzer],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - started
    log = done.stderr
    (out / "libfuzzer.log").write_text(log)
    runs = _last_int(r"stat::number_of_executed_units:\s*(\d+)", log)
    coverage = _last_int(r"cov: (\d+)", log)
    features = _last_int(r"ft: (\d+)", log)
    findings = (out / "findings.jsonl").read_text().splitlines() if (out / "findings.jsonl").exists() else []
    kinds: dict[str, int] = {}
    for line in findings:
        key = json.loads(line)["key"]
        kinds[key] = kinds.get(key, 0) + 1
    print(f"spec_fuzz: atheris (libFuzzer) over the spec gate, seed corpus of {seeds} files")
    print(f"  inputs run        {runs:,} of {args.runs:,} asked (exit {done.returncode})")
    print(f"  coverage          {coverage} edges, {features} features")
    print(f"  wall              {wall:.1f} s ({(runs or 0) / wall:,.0f} inputs/s)")
    print(f"  findings          {len(findings)} input(s), {len(kinds)} distinct")
    for key, count in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"    {count:>6}  {key}")
    print(f"  folder            {out}")
    if done.returncode not in (0,) and not runs:
        print(log[-3000:], file=sys.stderr)
    return 1 if findings else 0


def _last_int(pattern: str, text: str) -> int:
    found = re.findall(pattern, text)
    return int(found[-1]) if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
