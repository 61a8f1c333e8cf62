"""``mlbench data prepare|list``: real files in the real formats, clean errors, no tracebacks."""

from __future__ import annotations

import bz2
import json
import zipfile
from pathlib import Path

import pytest

from mlbench_tui.cli import main


def _epsilon_archives(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    train = "+1 1:0.5 2000:0.25\n-1 3:1\n+1 2:-0.5\n"
    (root / "epsilon_normalized.bz2").write_bytes(bz2.compress(train.encode()))
    (root / "epsilon_normalized.t.bz2").write_bytes(bz2.compress(b"-1 1:0.1\n"))


def test_prepare_epsilon_into_a_directory_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "eps"
    _epsilon_archives(target)
    assert main(["data", "prepare", "epsilon", "--dir", str(target)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(target)
    assert "3 train rows" in err  # the note about a non-official row count
    meta = json.loads((target / "meta.json").read_text())
    assert meta["splits"]["train"]["rows"] == 3 and meta["splits"]["val"]["rows"] == 1
    # Prepared already: a second call is a no-op; --force converts again.
    assert main(["data", "prepare", "epsilon", "--dir", str(target)]) == 0
    assert main(["data", "prepare", "epsilon", "--dir", str(target), "--force"]) == 0


def test_default_directory_is_the_workers_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLBENCH_DATA_DIR", str(tmp_path / "cache"))
    _epsilon_archives(tmp_path / "cache" / "epsilon")
    assert main(["data", "prepare", "epsilon"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "cache" / "epsilon")
    assert main(["data", "list", "-o", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["epsilon"]["prepared"]["features"] == 2000
    assert rows["wikitext2"]["prepared"] is None


def test_wrong_checksum_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "wt2"
    target.mkdir()
    with zipfile.ZipFile(target / "wikitext-2-v1.zip", "w") as z:
        z.writestr("wikitext-2/wiki.train.tokens", "not the real thing\n")
    assert main(["data", "prepare", "wikitext2", "--dir", str(target)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "md5" in err and "Traceback" not in err


def test_bad_libsvm_file_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "eps"
    target.mkdir()
    (target / "epsilon_normalized.bz2").write_bytes(bz2.compress(b"+1 1:0.5\n-1 banana\n"))
    (target / "epsilon_normalized.t.bz2").write_bytes(bz2.compress(b"-1 1:0.1\n"))
    assert main(["data", "prepare", "epsilon", "--dir", str(target)]) == 1
    assert "line 2" in capsys.readouterr().err


def test_unknown_dataset_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["data", "prepare", "mnist"])
    assert exc.value.code == 2
    assert "invalid choice: 'mnist'" in capsys.readouterr().err


def test_prepare_imagenet_indexes_a_layout_and_refuses_archives_that_are_not_the_official_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from support.imagenet_files import write_archives, write_layout

    monkeypatch.setenv("MLBENCH_DATA_DIR", str(tmp_path / "cache"))
    target = tmp_path / "cache" / "imagenet"
    write_layout(target, train=2, val=1)
    assert main(["data", "prepare", "imagenet", "--dir", str(target)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(target)
    assert "indexed 8 train, 4 val images of 4 classes (layout)" in err
    assert "not in the closed division" not in err  # not 1,000 classes: not meant as ImageNet
    assert main(["data", "list", "-o", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["imagenet"]["prepared"]["splits"]["train"]["images"] == 8
    archives = tmp_path / "archives"
    write_archives(archives, train=1, val=1)  # tiny archives: not the published checksums
    assert main(["data", "prepare", "imagenet", "--dir", str(archives)]) == 1
    err = capsys.readouterr().err
    assert "\nerror: " in err and "ILSVRC2012_img_train.tar: md5" in err and "Traceback" not in err
    assert main(["data", "prepare", "imagenet", "--dir", str(tmp_path / "nothing")]) == 1
    assert "image-net.org account" in capsys.readouterr().err
