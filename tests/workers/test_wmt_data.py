"""WMT preparation on small corpora written in the real download formats (tgz members, sgm test sets)."""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from mlbench_worker.data import toy_translation, wmt
from mlbench_worker.data.fetch import DatasetError
from mlbench_worker.data.options import ToyTranslation, TransformerSynthetic, parse_data_options
from mlbench_worker.knobs import HyperparameterError

EN_WORDS = ["the", "house", "is", "small", "big", "green", "red", "old", "new", "a", "cat", "dog", "sees"]
DE_WORDS = [
    "das",
    "haus",
    "ist",
    "klein",
    "gross",
    "gruen",
    "rot",
    "alt",
    "neu",
    "eine",
    "katze",
    "hund",
    "sieht",
]


def _tgz(path: Path, members: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _sentences(rng: np.random.Generator, n: int) -> tuple[list[str], list[str]]:
    en, de = [], []
    for _ in range(n):
        idx = rng.integers(0, len(EN_WORDS), size=int(rng.integers(3, 12)))
        en.append(" ".join(EN_WORDS[i] for i in idx))
        de.append(" ".join(DE_WORDS[i] for i in idx))
    return en, de


def _sgm(kind: str, lang: str, lines: list[str]) -> str:
    segs = "".join(f'<seg id="{i + 1}">{s}</seg>\n' for i, s in enumerate(lines))
    head = (
        f'<{kind}set setid="newstest2014" srclang="any" trglang="{lang}">\n<doc docid="d1" origlang="en">\n'
    )
    return f"{head}{segs}</doc>\n</{kind}set>\n"


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("wmt-downloads")
    rng = np.random.default_rng(0)
    ep_en, ep_de = _sentences(rng, 300)
    # noise the cleaner must drop: an empty side, a 1:10 length ratio, tabs to normalise
    ep_en += ["", "the cat", "the\tcat  sees   the dog"]
    ep_de += ["das haus", " ".join(["katze"] * 20), "die katze\tsieht den hund"]
    nc_en, nc_de = _sentences(rng, 200)
    test_en, test_de = _sentences(rng, 30)
    return {
        "europarl": _tgz(
            root / "europarl.tgz",
            {
                "europarl-v7.de-en.en": "\n".join(ep_en) + "\n",
                "europarl-v7.de-en.de": "\n".join(ep_de) + "\n",
            },
        ),
        "nc": _tgz(
            root / "nc.tgz",
            {
                "training-parallel-nc-v11/news-commentary-v11.de-en.en": "\n".join(nc_en) + "\n",
                "training-parallel-nc-v11/news-commentary-v11.de-en.de": "\n".join(nc_de) + "\n",
                "training-parallel-nc-v11/news-commentary-v11.cs-en.cs": "ignored\n",
            },
        ),
        "test": _tgz(
            root / "test-full.tgz",
            {
                "test-full/newstest2014-deen-src.en.sgm": _sgm("src", "en", test_en),
                "test-full/newstest2014-deen-ref.de.sgm": _sgm("ref", "de", test_de),
            },
        ),
    }


@pytest.fixture(scope="module")
def prepared(archives: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wmt-prepared")
    src, ref = wmt.read_test(archives["test"], "newstest2014-deen-src.en.sgm", "newstest2014-deen-ref.de.sgm")

    def pairs() -> Iterator[tuple[str, str]]:
        yield from wmt.read_parallel(archives["europarl"], "europarl-v7.de-en.en", "europarl-v7.de-en.de")
        yield from wmt.read_parallel(
            archives["nc"], "news-commentary-v11.de-en.en", "news-commentary-v11.de-en.de"
        )

    wmt.binarise(out, pairs, src, ref, name="wmt16", vocab_size=80, max_tokens=40)
    return out


def test_reads_parallel_members_by_basename_and_sgm_segments(archives: dict[str, Path]) -> None:
    pairs = list(
        wmt.read_parallel(archives["nc"], "news-commentary-v11.de-en.en", "news-commentary-v11.de-en.de")
    )
    assert len(pairs) == 200 and all(en and de for en, de in pairs)
    src, ref = wmt.read_test(archives["test"], "newstest2014-deen-src.en.sgm", "newstest2014-deen-ref.de.sgm")
    assert len(src) == len(ref) == 30 and "<seg" not in src[0]
    with pytest.raises(DatasetError, match="no member"):
        list(wmt.read_parallel(archives["nc"], "missing.en", "missing.de"))


def test_sides_with_different_line_counts_are_refused(tmp_path: Path) -> None:
    bad = _tgz(tmp_path / "bad.tgz", {"a.en": "one\ntwo\n", "a.de": "eins\n"})
    with pytest.raises(DatasetError, match="different line counts"):
        list(wmt.read_parallel(bad, "a.en", "a.de"))


def test_cleaning_drops_empty_and_unbalanced_pairs_and_normalises_spaces() -> None:
    assert wmt.clean_pair("", "das haus") is None
    assert wmt.clean_pair("the cat", " ".join(["katze"] * 20)) is None
    assert wmt.clean_pair("the\tcat  sees", "die\u00a0katze sieht") == ("the cat sees", "die katze sieht")


def test_binarised_shards_are_bucketed_encoded_and_decodable(prepared: Path) -> None:
    corpus = wmt.open_prepared(prepared)
    counts = json.loads((prepared / "meta.json").read_text())["counts"]
    assert counts["train_read"] == 503 and counts["train_clean"] == 501  # two noisy pairs dropped
    assert counts["train_kept"] == len(corpus.train)  # within max_tokens
    train = corpus.train
    assert 450 < len(train) <= 501 and len(corpus.test) == 30 == len(corpus.references)
    assert isinstance(train.src, np.memmap)  # the worker maps the shards, never loads them
    lengths = np.maximum(train.src_lens, train.tgt_lens)
    assert (lengths <= 40).all()
    assert (np.diff(lengths // wmt.BUCKET_WIDTH) >= 0).all()  # sorted into length buckets
    for i in range(len(train)):
        src, tgt = train.pair(i)
        assert src[-1] == wmt.EOS and tgt[-1] == wmt.EOS and (src[:-1] > wmt.EOS).all()
    # the test references survive encoding: decoding the target ids gives the reference back
    for i in range(5):
        assert corpus.detokenize(corpus.test.pair(i)[1].tolist()) == corpus.references[i]
    assert {"spm.model", "train.src.i32", "train.src.off.i64", "test.ref.de"} <= {
        p.name for p in prepared.iterdir()
    }


def test_task_length_limits_are_applied_on_load(prepared: Path) -> None:
    corpus = wmt.open_prepared(prepared)
    view = corpus.length_filtered("train", 8)
    assert 0 < len(view) < len(corpus.train)
    assert (view.src_lens <= 8).all() and (view.tgt_lens <= 8).all()


def test_prepare_refuses_an_archive_that_does_not_match_its_checksum(tmp_path: Path) -> None:
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / "europarl-v7-de-en.tgz").write_bytes(b"not the real archive")
    with pytest.raises(DatasetError, match="expected 197785698"):
        wmt.prepare_wmt16(tmp_path)


def test_open_prepared_explains_an_unprepared_directory(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="mlbench data prepare"):
        wmt.open_prepared(tmp_path)


def test_synthetic_targets_are_the_mapped_reversed_sources() -> None:
    corpus = toy_translation.synthetic(
        ToyTranslation(train_samples=50, val_samples=10, vocab_words=6), seed=3
    )
    words = 6
    mapping: dict[int, int] = {}
    for i in range(len(corpus.train)):
        src, tgt = corpus.train.pair(i)
        assert len(src) == len(tgt)
        for s, t in zip(src[:-1], tgt[:-1][::-1], strict=True):
            assert mapping.setdefault(int(s), int(t)) == int(t)  # one consistent word mapping
    assert len(set(mapping.values())) == len(mapping) <= words
    assert corpus.references[0] == corpus.detokenize(corpus.test.pair(0)[1].tolist())
    with pytest.raises(HyperparameterError, match="'shuffle' for data option 'mode'"):
        parse_data_options("4a", "synthetic", {"mode": "shuffle"})


def test_mlbench_data_prepare_reports_a_corrupt_download_without_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    downloads = tmp_path / "wmt17" / "downloads"
    downloads.mkdir(parents=True)
    (downloads / "europarl-v7-de-en.tgz").write_bytes(b"truncated")
    proc = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", "data", "prepare", "wmt17", "--dir", str(tmp_path / "wmt17")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "197785698" in proc.stderr and "Traceback" not in proc.stderr


def test_a_prepared_directory_trains_and_scores_through_the_task(prepared: Path) -> None:
    import torch
    from mlbench_worker.comm import SingleComm
    from mlbench_worker.config import parse_config
    from mlbench_worker.context import RunContext
    from mlbench_worker.launch.rendezvous import Rendezvous
    from mlbench_worker.tasks import transformer
    from mlbench_worker.timing.tracker import Tracker
    from mlbench_worker.translation.trainer import TranslationTrainer

    class Quiet:
        def metric(self, *args: object, **kw: object) -> None: ...
        def log(self, text: str, stream: str = "stdout") -> None: ...
        def event(self, kind: str, payload: dict[str, object]) -> None: ...
        def flush(self, timeout: float | None = None) -> bool:
            return True

        def close(self, timeout: float = 10.0) -> None: ...

    config = parse_config(
        {
            "run_id": "r",
            "task": "4b",
            "backend": "gloo",
            "world_size": 1,
            # download into an already prepared directory: verified and reused, nothing fetched
            "data": {"source": "download", "path": str(prepared)},
            "hyperparameters": {"global_batch_tokens": 400, "max_len": 30, "beam_size": 2},
        }
    )
    ctx = RunContext(
        config, Rendezvous(0, 1, 0, None, None, "single"), SingleComm(), torch.device("cpu"), Quiet()
    )
    # real data trains the reference model; shrink it through the task's own builder for speed
    tiny = TransformerSynthetic(d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1)
    task = dataclasses.replace(
        transformer.TASK, build_model=lambda vocab, _sizes: transformer.build_model(vocab, tiny)
    )
    trainer = TranslationTrainer(ctx, task)
    assert trainer.corpus.name == "wmt16" and len(trainer.test_refs) == len(trainer.test_data) <= 30
    result = trainer.train_step(next(iter(trainer.train_batches(1))), Tracker().clock.record)
    assert float(result.loss) > 0 and result.samples > 0
    metrics = trainer.validate()
    assert 0.0 <= metrics["val_global_BLEU-Score"] <= 100.0 and metrics["val_global_loss"] > 0
