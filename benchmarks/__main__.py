"""``python -m benchmarks NAME [ARGS...]``: run one registered benchmark (no NAME lists them)."""

from __future__ import annotations

import importlib
import inspect
import sys

from benchmarks import BENCHMARKS


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print("usage: python -m benchmarks NAME [ARGS...]\n\nbenchmarks:")
        for name, module in sorted(BENCHMARKS.items()):
            print(f"  {name:<20} {module}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    module_name = BENCHMARKS.get(name)
    if module_name is None:
        print(f"error: unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}", file=sys.stderr)
        return 2
    entry = importlib.import_module(module_name).main
    if inspect.signature(entry).parameters:
        result = entry(rest)
    else:
        sys.argv = [module_name, *rest]
        result = entry()
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
