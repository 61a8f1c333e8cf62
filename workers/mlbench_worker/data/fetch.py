"""Downloading dataset archives with checksums, atomically, and without third-party packages.

Every dataset module describes its files as ``RemoteFile``s (URL plus the published checksums) and
calls ``fetch``: the file is streamed to a temporary name next to the destination, hashed while it
is written, checked, and only then renamed into place, so an interrupted download never leaves a
file that looks complete. Where no checksum has been published (LIBSVM's epsilon files), the
first download's sha256 and size are recorded in a manifest next to the data and every later use
is verified against that record (trust on first use), which still catches corrupt or swapped
files.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mlbench_worker import rank_env
from mlbench_worker.env_settings import parse_data_dir

CHUNK = 1 << 20
MANIFEST = "sources.json"


class DatasetError(RuntimeError):
    """A dataset is missing, corrupt, or cannot be downloaded; the message says what to do."""


@dataclass(frozen=True)
class RemoteFile:
    """One file to download: where from, under which name, and the checksums that identify it."""

    url: str
    filename: str
    checksums: Mapping[str, str] = field(default_factory=dict)  # algorithm ("md5", "sha1", "sha256") -> hex
    size: int | None = None


def _hashers(algorithms: set[str]) -> dict[str, hashlib._Hash]:
    return {name: hashlib.new(name) for name in sorted(algorithms)}


def file_digests(path: Path, algorithms: set[str]) -> dict[str, str]:
    """Hex digests of ``path`` for each algorithm, reading it once."""
    hashers = _hashers(algorithms)
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            for h in hashers.values():
                h.update(chunk)
    return {name: h.hexdigest() for name, h in hashers.items()}


def _check(remote: RemoteFile, digests: Mapping[str, str], size: int, where: str) -> None:
    if remote.size is not None and size != remote.size:
        raise DatasetError(f"{where}: size {size} bytes, expected {remote.size} ({remote.url})")
    for name, expected in remote.checksums.items():
        if digests.get(name, "").lower() != expected.lower():
            raise DatasetError(
                f"{where}: {name} {digests.get(name)} does not match the published {expected}; "
                f"delete the file and download it again ({remote.url})"
            )


def _read_manifest(directory: Path) -> dict[str, dict[str, object]]:
    path = directory / MANIFEST
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path} is unreadable ({exc}); delete it to re-record the sources") from None
    return doc if isinstance(doc, dict) else {}


def _write_manifest(directory: Path, doc: Mapping[str, object]) -> None:
    tmp = directory / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, directory / MANIFEST)


def _record(remote: RemoteFile, path: Path, digests: Mapping[str, str], size: int) -> None:
    """Compare with, or add to, the manifest of first-download digests next to ``path``."""
    manifest = _read_manifest(path.parent)
    entry = manifest.get(remote.filename)
    if isinstance(entry, dict):
        if entry.get("sha256") != digests["sha256"] or entry.get("size") != size:
            raise DatasetError(
                f"{path}: sha256 {digests['sha256']} ({size} bytes) differs from the one recorded at "
                f"first download ({entry.get('sha256')}, {entry.get('size')} bytes) in "
                f"{path.parent / MANIFEST}; the file changed or is corrupt"
            )
        return
    manifest[remote.filename] = {
        "url": remote.url,
        "sha256": digests["sha256"],
        "size": size,
        "verified_against": ", ".join(sorted(remote.checksums)) or "nothing published: recorded at first use",
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_manifest(path.parent, manifest)


def verify(remote: RemoteFile, path: Path) -> dict[str, str]:
    """Check an existing file against the published checksums and the recorded manifest entry.

    A file seen for the first time gets its sha256 and size recorded (trust on first use where
    nothing is published). Returns the digests computed.
    """
    digests = file_digests(path, set(remote.checksums) | {"sha256"})
    size = path.stat().st_size
    _check(remote, digests, size, str(path))
    _record(remote, path, digests, size)
    return digests


def _stream(
    response: IO[bytes],
    out: IO[bytes],
    hashers: Mapping[str, hashlib._Hash],
    total: int | None,
    progress: Callable[[int, int | None], None] | None,
) -> int:
    done = 0
    while chunk := response.read(CHUNK):
        out.write(chunk)
        for h in hashers.values():
            h.update(chunk)
        done += len(chunk)
        if progress is not None:
            progress(done, total)
    return done


def stderr_progress(label: str) -> Callable[[int, int | None], None]:
    """A progress callback that prints at most one line per second to stderr."""
    last = [0.0]

    def report(done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - last[0] < 1.0 and (total is None or done < total):
            return
        last[0] = now
        pct = f" ({100.0 * done / total:.0f}%)" if total else ""
        print(f"{label}: {done / 1e6:.1f} MB{pct}", file=sys.stderr, flush=True)

    return report


def fetch(
    remote: RemoteFile,
    directory: Path,
    *,
    progress: Callable[[int, int | None], None] | None = None,
    timeout: float = 60.0,
) -> Path:
    """Download ``remote`` into ``directory`` unless a verified copy is already there; return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    dest = directory / remote.filename
    if dest.exists():
        verify(remote, dest)
        return dest
    tmp = directory / f".{remote.filename}.part"
    hashers = _hashers(set(remote.checksums) | {"sha256"})
    try:
        request = urllib.request.Request(remote.url, headers={"User-Agent": "mlbench-worker"})
        with urllib.request.urlopen(request, timeout=timeout) as response, tmp.open("wb") as out:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else remote.size
            _stream(response, out, hashers, total, progress)
    except OSError as exc:  # URLError and HTTPError are OSErrors
        tmp.unlink(missing_ok=True)
        raise DatasetError(
            f"cannot download {remote.url}: {getattr(exc, 'reason', None) or exc}; download it by hand "
            f"into {directory} and run the command again"
        ) from None
    digests = {name: h.hexdigest() for name, h in hashers.items()}
    try:
        _check(remote, digests, tmp.stat().st_size, remote.url)
    except DatasetError:
        tmp.unlink(missing_ok=True)
        raise
    size = tmp.stat().st_size
    os.replace(tmp, dest)
    _record(remote, dest, digests, size)
    return dest


def default_data_dir() -> Path:
    """Where downloaded datasets are cached when a spec gives no path (``$MLBENCH_DATA_DIR``)."""
    try:
        env = parse_data_dir(os.environ.get(rank_env.DATA_DIR))
    except ValueError as exc:
        raise DatasetError(str(exc)) from None
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mlbench" / "data"
