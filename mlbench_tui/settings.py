"""User settings: where the store lives, which server to talk to, the default target, TUI keys.

Read from ``settings.toml`` in the config directory. ``MLBENCH_HOME`` puts config, data, cache
and state under one directory (tests and containers use it); otherwise the platform's user
directories are used (platformdirs). Environment variables win over the file: ``MLBENCH_DB``
(store path), ``MLBENCH_SERVER_URL`` and ``MLBENCH_EMULATED_NETWORK``. Example ``settings.toml``::

    store = "~/benchmarks/mlbench.db"
    server_url = "http://127.0.0.1:8765"
    default_target = "local"
    emulated_network = "198.18.0.0/15"   # addresses of emulated nodes (spec.network)

    [keymap]
    quit = "q"
    refresh = "ctrl+r"
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mlbench_tui.errors import MlbenchError

APP_NAME = "mlbench"
SETTINGS_FILE = "settings.toml"
DEFAULT_SERVER_HOST = "127.0.0.1"
DEFAULT_SERVER_PORT = 8765
DEFAULT_SERVER_URL = f"http://{DEFAULT_SERVER_HOST}:{DEFAULT_SERVER_PORT}"

_KEYS = ("store", "server_url", "default_target", "keymap", "emulated_network")


class SettingsError(MlbenchError):
    """``settings.toml`` is unreadable or holds a wrong value."""

    exit_code = 2


@dataclass(frozen=True)
class Paths:
    """Directories mlbench writes to; all under ``MLBENCH_HOME`` when it is set."""

    config_dir: Path
    data_dir: Path
    cache_dir: Path
    state_dir: Path

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Paths:
        env = os.environ if environ is None else environ
        home = env.get("MLBENCH_HOME")
        if home:
            base = Path(home).expanduser()
            return cls(config_dir=base, data_dir=base, cache_dir=base / "cache", state_dir=base / "state")
        import platformdirs

        return cls(
            config_dir=Path(platformdirs.user_config_dir(APP_NAME)),
            data_dir=Path(platformdirs.user_data_dir(APP_NAME)),
            cache_dir=Path(platformdirs.user_cache_dir(APP_NAME)),
            state_dir=Path(platformdirs.user_state_dir(APP_NAME)),
        )

    @property
    def settings_file(self) -> Path:
        return self.config_dir / SETTINGS_FILE


@dataclass(frozen=True)
class Settings:
    """The effective settings (file values overridden by environment variables)."""

    paths: Paths
    store_path: Path  # SQLite metric store (MLBENCH_DB overrides the file)
    server_url: str = DEFAULT_SERVER_URL
    default_target: Literal["local", "kubernetes"] = "local"
    keymap: dict[str, str] = field(default_factory=dict)
    source: Path | None = None  # the settings file read, if any
    # The IPv4 range emulated nodes take their addresses from (spec.network on local runs); None:
    # RFC 2544's benchmarking block 198.18.0.0/15, which no network routes.
    emulated_network: str | None = None

    @property
    def datasets_dir(self) -> Path:
        """Default cache for downloaded datasets (``data.source: download`` without a path)."""
        return self.paths.cache_dir / "datasets"

    @property
    def runs_dir(self) -> Path:
        """Per-run working files: worker configs, rank logs, spools."""
        return self.paths.state_dir / "runs"


def _fail(path: Path, message: str) -> SettingsError:
    return SettingsError(f"{path}: {message}", hint=f"fix or remove {path}")


def _parse(path: Path, raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in raw:
        if key not in _KEYS:
            import difflib

            close = difflib.get_close_matches(key, _KEYS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise _fail(path, f"unknown setting '{key}'{hint}; known: {', '.join(_KEYS)}")
    for key in ("store", "server_url", "emulated_network"):
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key]:
                raise _fail(path, f"'{key}' must be a non-empty string")
            out[key] = raw[key]
    if "server_url" in out and not out["server_url"].startswith(("http://", "https://")):
        raise _fail(path, "'server_url' must start with http:// or https://")
    if "emulated_network" in out:
        import ipaddress

        try:
            ipaddress.IPv4Network(out["emulated_network"])
        except ValueError as exc:
            raise _fail(
                path, f"'emulated_network' must be an IPv4 network such as '198.18.0.0/15': {exc}"
            ) from None
    if "default_target" in raw:
        if raw["default_target"] not in ("local", "kubernetes"):
            raise _fail(path, "'default_target' must be 'local' or 'kubernetes'")
        out["default_target"] = raw["default_target"]
    if "keymap" in raw:
        keymap = raw["keymap"]
        if not isinstance(keymap, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in keymap.items()
        ):
            raise _fail(path, '[keymap] must map action names to key strings, e.g. quit = "q"')
        out["keymap"] = dict(keymap)
    return out


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    """Read ``settings.toml`` (if present) and apply environment overrides."""
    env = dict(os.environ) if environ is None else environ
    paths = Paths.from_env(env)
    file_values: dict[str, Any] = {}
    source: Path | None = None
    if paths.settings_file.is_file():
        source = paths.settings_file
        try:
            raw = tomllib.loads(source.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise _fail(source, f"cannot read: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise _fail(source, f"invalid TOML: {exc}") from None
        file_values = _parse(source, raw)
    store = env.get("MLBENCH_DB") or file_values.get("store")
    store_path = Path(store).expanduser() if store else paths.data_dir / "mlbench.db"
    server_url = env.get("MLBENCH_SERVER_URL") or file_values.get("server_url") or DEFAULT_SERVER_URL
    return Settings(
        paths=paths,
        store_path=store_path,
        server_url=server_url.rstrip("/"),
        default_target=file_values.get("default_target", "local"),
        keymap=file_values.get("keymap", {}),
        source=source,
        emulated_network=env.get("MLBENCH_EMULATED_NETWORK") or file_values.get("emulated_network"),
    )
