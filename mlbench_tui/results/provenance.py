"""Which rules computed a stored result, so a store never serves a figure today's rules would not
print.

A run's result is computed once, when it ends, and stored; the rules behind it (the utilisation
threshold, the straggler factor, the bounds...) live in this package. ``RULES`` is a digest of the
package's source and data files: a result stamped with another digest was computed by other rules,
and whoever serves it recomputes it from the run's stored metrics and events first
(``server.results.refresh``), saying so in ``RunResult.computed_by``.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

from mlbench_tui.results.model import Provenance, RunResult

RULE_FILES = (".py", ".csv")


@functools.cache
def rules_digest() -> str:
    """A digest of this package's rule files (the first 12 hex digits of their SHA-256)."""
    digest = hashlib.sha256()
    package = resources.files(__package__ or "mlbench_tui.results")
    for item in sorted(package.iterdir(), key=lambda entry: entry.name):
        if item.is_file() and item.name.endswith(RULE_FILES):
            digest.update(item.name.encode() + b"\0" + item.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def current(recomputed_from: str | None = None) -> Provenance:
    """The stamp of a result computed now, by this version's rules; ``recomputed_from`` names the
    rules of the stored result it replaces ("" when that one was stamped by none)."""
    from mlbench_tui import __version__

    return Provenance(mlbench=__version__, rules=rules_digest(), recomputed_from=recomputed_from)


def is_current(result: RunResult) -> bool:
    """Whether ``result`` was computed by this version's rules."""
    return result.computed_by is not None and result.computed_by.rules == rules_digest()


def stored_rules(result: RunResult) -> str:
    """The rules a stored result was computed by ("" for one stamped by none)."""
    return result.computed_by.rules if result.computed_by is not None else ""


def provenance_text(provenance: Provenance) -> str:
    """``mlbench 0.1.0, result rules 3f2a1c9e0b7d`` and, for a recomputed result, what it replaced."""
    text = f"mlbench {provenance.mlbench}, result rules {provenance.rules}"
    if provenance.recomputed_from is None:
        return text
    before = provenance.recomputed_from or "unrecorded"
    return f"{text} (recomputed from the stored metrics; it replaced a result of rules {before})"
