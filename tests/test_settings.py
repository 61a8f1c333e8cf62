"""User settings: MLBENCH_HOME layout, settings.toml, environment overrides, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlbench_tui.settings import DEFAULT_SERVER_URL, SettingsError, load_settings


def test_defaults_under_mlbench_home(tmp_path: Path) -> None:
    s = load_settings({"MLBENCH_HOME": str(tmp_path)})
    assert s.paths.config_dir == tmp_path and s.store_path == tmp_path / "mlbench.db"
    assert s.server_url == DEFAULT_SERVER_URL and s.default_target == "local" and s.keymap == {}
    assert s.datasets_dir == tmp_path / "cache" / "datasets" and s.runs_dir == tmp_path / "state" / "runs"
    assert s.source is None


def test_settings_file_and_environment_overrides(tmp_path: Path) -> None:
    (tmp_path / "settings.toml").write_text(
        'store = "~/x.db"\nserver_url = "http://10.0.0.1:9000/"\ndefault_target = "kubernetes"\n'
        '[keymap]\nquit = "ctrl+q"\n'
    )
    s = load_settings({"MLBENCH_HOME": str(tmp_path)})
    assert s.store_path == Path("~/x.db").expanduser() and s.server_url == "http://10.0.0.1:9000"
    assert s.default_target == "kubernetes" and s.keymap == {"quit": "ctrl+q"}
    assert s.source == tmp_path / "settings.toml"
    env = {
        "MLBENCH_HOME": str(tmp_path),
        "MLBENCH_DB": str(tmp_path / "o.db"),
        "MLBENCH_SERVER_URL": "http://h:1",
    }
    s = load_settings(env)
    assert s.store_path == tmp_path / "o.db" and s.server_url == "http://h:1"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("stroe = 'x'", "unknown setting 'stroe' (did you mean 'store'?)"),
        ("server_url = 5", "'server_url' must be a non-empty string"),
        ("server_url = 'localhost:1'", "must start with http://"),
        ("default_target = 'cloud'", "'default_target' must be 'local' or 'kubernetes'"),
        ("keymap = 'q'", "[keymap] must map action names"),
        ("store = [", "invalid TOML"),
    ],
)
def test_bad_settings_are_clear_errors(tmp_path: Path, text: str, needle: str) -> None:
    (tmp_path / "settings.toml").write_text(text)
    with pytest.raises(SettingsError) as info:
        load_settings({"MLBENCH_HOME": str(tmp_path)})
    assert needle in info.value.message and info.value.exit_code == 2
    assert str(tmp_path / "settings.toml") in info.value.message


def test_uses_process_environment_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path))
    assert load_settings().paths.data_dir == tmp_path
