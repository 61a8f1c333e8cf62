"""Where a spec's dataset lives: a ``data.path`` the target's ranks can open.

Ranks run in their run's directory, so a relative path would name a directory nobody meant (a
leading ``~`` is the rank's home, expanded where it runs); ``pvc://CLAIM/SUBPATH`` names a
Kubernetes PersistentVolumeClaim, which only a Kubernetes target mounts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from mlbench_tui.spec.diagnostics import Loc, PolicyIssue
from mlbench_tui.spec.targets import KubernetesTarget

PVC_SCHEME = "pvc://"
_CLAIM = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def data_path_issues(source: str, path: str | None, target: object) -> Iterator[PolicyIssue]:
    """What is wrong with ``data.path`` for ``source`` on ``target`` (nothing when unset)."""
    if path is None:
        return
    loc: Loc = ("spec", "data", "path")
    if path.startswith(PVC_SCHEME):
        claim, _, sub = path[len(PVC_SCHEME) :].partition("/")
        if not isinstance(target, KubernetesTarget):
            yield PolicyIssue(
                loc,
                f"{path!r} names a Kubernetes PersistentVolumeClaim, which only a kubernetes target mounts",
                "give a directory the ranks can read, or set target.kind: kubernetes",
            )
        elif len(claim) > 253 or not _CLAIM.fullmatch(claim):
            yield PolicyIssue(
                loc,
                f"{path!r} does not name a PersistentVolumeClaim: {claim!r} is not a claim name",
                "use pvc://CLAIM/SUBPATH with a lowercase claim name",
            )
        elif ".." in sub.split("/"):
            yield PolicyIssue(loc, f"{path!r} leaves the volume", "remove '..' from the subpath")
        return
    if "://" in path:
        yield PolicyIssue(
            loc,
            f"{path!r} is a URL, not a directory",
            "use source 'download' to fetch the dataset, or pvc://CLAIM/SUBPATH on kubernetes",
        )
    elif not path.startswith(("/", "~")):
        yield PolicyIssue(
            loc,
            f"{path!r} is relative: ranks run in their run directory, not where the spec is",
            "write an absolute path",
        )
