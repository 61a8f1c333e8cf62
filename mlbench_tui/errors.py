"""The error hierarchy: every failure a user can cause or meet is an ``MlbenchError``.

The CLI maps these to a message on stderr and an exit code; nothing else should reach the user
as a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass


class MlbenchError(Exception):
    """Base class: a message meant for the user, an optional hint, and the CLI exit code."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        """The text the CLI prints on stderr."""
        if self.hint:
            return f"error: {self.message}\nhint: {self.hint}"
        return f"error: {self.message}"


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a spec file, located by file, line and column (1-based)."""

    file: str
    line: int
    col: int
    message: str
    hint: str | None = None

    def render(self) -> str:
        text = f"{self.file}:{self.line}:{self.col}: {self.message}"
        if self.hint:
            text += f" (hint: {self.hint})"
        return text


class SpecError(MlbenchError):
    """A spec could not be loaded or validated; carries every issue found, not just the first."""

    exit_code = 2

    def __init__(self, issues: list[SpecIssue]) -> None:
        self.issues = list(issues)
        summary = f"{len(self.issues)} problem(s) in spec" if self.issues else "invalid spec"
        super().__init__(summary)

    def render(self) -> str:
        return "\n".join(issue.render() for issue in self.issues) or "error: invalid spec"


class UsageError(MlbenchError):
    """The command line itself is wrong (bad option value, missing argument)."""

    exit_code = 2


class ExecutorError(MlbenchError):
    """A run could not be launched, watched or cancelled."""


class StoreError(MlbenchError):
    """The metric store could not be opened, migrated or written."""


class ServerError(MlbenchError):
    """The metrics server could not be reached or answered with an error."""


class InfraError(MlbenchError):
    """Cluster provisioning failed, or a tool it needs (pulumi, kind, a container engine) is missing."""


class RunFailedError(MlbenchError):
    """One or more benchmark runs ended in a failed state."""


class Conflict(MlbenchError):
    """A write the store refuses in the state it is in: a run already under way, a run that has
    ended, a rank that has stopped, a rank outside the run. The HTTP API answers it with
    ``status`` and ``reason`` (``{"error": reason, "detail": message}``)."""

    def __init__(self, message: str, *, reason: str = "conflict", status: int = 409, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.reason = reason
        self.status = status


class NotFound(MlbenchError):
    """A run (or what was asked of it) does not exist: the store raises it, the HTTP API answers
    it as 404, the HTTP client raises it again from that 404, and the CLI prints it."""

    status = 404


def from_os_error(exc: OSError) -> MlbenchError:
    """An ``OSError`` met writing or reading a file, as a message naming the file and what to do
    (a full disk, a read-only folder, a missing permission) instead of a traceback."""
    import errno

    where = exc.filename or "a file"
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return MlbenchError(
            f"no space left on the disk of {where} ({reason})",
            hint="free space on that disk (or point MLBENCH_HOME / MLBENCH_DB elsewhere) and run the "
            "command again; nothing already stored is lost",
        )
    if exc.errno == errno.EROFS:
        return MlbenchError(
            f"{where} is on a read-only file system",
            hint="read commands (status, results, logs, report, tui) still work; to write, point "
            "MLBENCH_HOME / MLBENCH_DB at a writable folder",
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return MlbenchError(f"permission denied: {where}", hint="check the owner and mode of that path")
    return MlbenchError(f"{reason}: {where}")
