"""Each task's data options, declared once: what ``data.options`` may hold for each data source.

Standard library only. Every option is a field of a frozen dataclass with its type, default and
bounds (a ``Knob``, as hyperparameters are declared); rules across options are ``problems()``.
The engine checks a spec's ``data.options`` against these declarations (names with a did-you-mean,
types, bounds) and records them as written; a rank parses its config's options into the same
class and reads attributes. A synthetic set is no larger than the real dataset it stands for,
and a smoke run's model sizes only shrink the official model. A source not declared for a task
(a prepared ``path``, a ``download``) takes no options. A new task declares its classes here and
adds them to ``DATA_OPTIONS``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Literal, TypeVar

from mlbench_worker.knobs import HyperparameterError, HyperparameterProblem, check_values, knob

MAX_SEED = 2**31 - 1
OPTION = "data option"


@dataclass(frozen=True)
class DataOptions:
    """The options of a source that takes none (a prepared ``path``, a ``download``)."""

    TASK: ClassVar[str] = ""
    SOURCE: ClassVar[str] = ""

    def problems(self) -> Iterator[HyperparameterProblem]:
        """Rules across options (none by default)."""
        return iter(())


def _seed() -> Any:
    return knob(0, "Seed of the generated set (the same set on every rank).", "override", ge=0, le=MAX_SEED)


@dataclass(frozen=True)
class SyntheticImages(DataOptions):
    """CIFAR-shaped learnable images (``data.cifar10.synthetic``): class prototypes plus noise."""

    SOURCE: ClassVar[str] = "synthetic"

    train_samples: int = knob(4096, "Training images (CIFAR-10 has 50,000).", "override", ge=1, le=50_000)
    val_samples: int = knob(512, "Validation images (CIFAR-10 has 10,000).", "override", ge=1, le=10_000)
    seed: int = _seed()
    noise: float = knob(
        48.0, "Per-pixel noise, a standard deviation on the 0-255 scale.", "override", ge=0, le=255
    )


@dataclass(frozen=True)
class Cifar10Synthetic(SyntheticImages):
    """Task 1a's synthetic source (both frameworks)."""

    TASK: ClassVar[str] = "1a"


@dataclass(frozen=True)
class EpsilonSynthetic(DataOptions):
    """A learnable linear problem shaped like epsilon (``data.epsilon.synthetic``)."""

    TASK: ClassVar[str] = "2a"
    SOURCE: ClassVar[str] = "synthetic"

    train_samples: int = knob(4096, "Training rows (epsilon has 400,000).", "override", ge=1, le=400_000)
    val_samples: int = knob(1024, "Validation rows (epsilon has 100,000).", "override", ge=1, le=100_000)
    features: int = knob(2000, "Features per row (epsilon has 2,000).", "override", ge=1, le=2000)
    signal: float = knob(
        1.5, "Distance of the class means from 0, in noise deviations.", "override", gt=0, le=100
    )
    seed: int = _seed()


@dataclass(frozen=True)
class WikiText2Synthetic(DataOptions):
    """A toy language (``data.wikitext2.synthetic``), and smaller model sizes for a smoke run."""

    TASK: ClassVar[str] = "3a"
    SOURCE: ClassVar[str] = "synthetic"

    train_tokens: int = knob(
        50_000, "Training tokens (WikiText-2 has 2,088,628).", "override", ge=2, le=2_088_628
    )
    val_tokens: int = knob(
        10_000, "Validation tokens (WikiText-2 has 217,646).", "override", ge=2, le=217_646
    )
    vocab_size: int = knob(200, "Words (WikiText-2 has 33,278).", "override", ge=3, le=33_278)
    branching: int = knob(3, "Successors of each word in the toy language.", "override", ge=1, le=33_277)
    seed: int = _seed()
    bptt: int | None = knob(None, "Mean BPTT length; default the task's 70.", "override", ge=2, le=70)
    emb_size: int | None = knob(None, "Embedding size; default the task's 400.", "override", ge=1, le=400)
    hidden_size: int | None = knob(None, "LSTM hidden size; default 1150.", "override", ge=1, le=1150)
    num_layers: int | None = knob(None, "LSTM layers; default 3.", "override", ge=1, le=3)

    def problems(self) -> Iterator[HyperparameterProblem]:
        if self.branching >= self.vocab_size:
            yield HyperparameterProblem(
                "branching",
                f"data option 'branching' ({self.branching}) must be below vocab_size ({self.vocab_size})",
            )


@dataclass(frozen=True)
class ToyTranslation(DataOptions):
    """A toy translation (``data.toy_translation.synthetic``): mapped words, reversed or copied."""

    SOURCE: ClassVar[str] = "synthetic"

    train_samples: int = knob(4000, "Training sentence pairs.", "override", ge=1, le=1_000_000)
    val_samples: int = knob(
        200, "Test sentence pairs (newstest has about 3,000).", "override", ge=1, le=10_000
    )
    vocab_words: int = knob(20, "Source words (each maps to one target word).", "override", ge=2, le=10_000)
    min_len: int = knob(3, "Shortest sentence in words.", "override", ge=1, le=64)
    max_len: int = knob(
        8, "Longest sentence in words (within the task's length limits).", "override", ge=1, le=64
    )
    mode: Literal["reverse", "copy"] = knob(
        "reverse", "Target order: the source reversed, or copied.", "override"
    )
    seed: int | None = knob(
        None, "Seed of the generated set; default: the run's seed.", "override", ge=0, le=MAX_SEED
    )

    def problems(self) -> Iterator[HyperparameterProblem]:
        if self.min_len > self.max_len:
            yield HyperparameterProblem(
                "min_len", f"data option 'min_len' ({self.min_len}) must not exceed max_len ({self.max_len})"
            )


@dataclass(frozen=True)
class GnmtSynthetic(ToyTranslation):
    """Task 4a's synthetic source, and smaller GNMT sizes for a smoke run."""

    TASK: ClassVar[str] = "4a"

    hidden_size: int = knob(1024, "LSTM hidden size (the reference's 1024).", "override", ge=1, le=1024)
    num_layers: int = knob(4, "LSTM layers (2 to the reference's 4).", "override", ge=2, le=4)
    dropout: float = knob(0.2, "Dropout.", "override", ge=0, lt=1)
    init_weight: float = knob(0.1, "Uniform initialisation range (-w, w).", "override", gt=0, le=1)
    embedding_init_std: float | None = knob(
        None, "Normal initialisation of the embeddings; default uniform.", "override", gt=0, le=1
    )


@dataclass(frozen=True)
class TransformerSynthetic(ToyTranslation):
    """Task 4b's synthetic source, and a smaller Transformer for a smoke run."""

    TASK: ClassVar[str] = "4b"

    d_model: int = knob(512, "Model width (Transformer base: 512).", "override", ge=2, le=512)
    heads: int = knob(8, "Attention heads (base: 8).", "override", ge=1, le=8)
    ffn_dim: int = knob(2048, "Feed-forward width (base: 2048).", "override", ge=1, le=2048)
    encoder_layers: int = knob(6, "Encoder layers (base: 6).", "override", ge=1, le=6)
    decoder_layers: int = knob(6, "Decoder layers (base: 6).", "override", ge=1, le=6)
    dropout: float = knob(0.1, "Dropout.", "override", ge=0, lt=1)

    def problems(self) -> Iterator[HyperparameterProblem]:
        yield from super().problems()
        if self.d_model % (2 * self.heads):
            yield HyperparameterProblem(
                "d_model",
                f"data option 'd_model' ({self.d_model}) must be an even multiple of heads ({self.heads}): "
                "each head takes an equal share, and the positional encoding pairs sines with cosines",
            )


@dataclass(frozen=True)
class SyntheticImageOptions(DataOptions):
    """Task 1b's synthetic source: a learnable stand-in generated on the rank's device from a fixed
    seed (one random low-frequency prototype per class plus per-image noise)."""

    TASK: ClassVar[str] = "1b"
    SOURCE: ClassVar[str] = "synthetic"

    train_samples: int = knob(
        8192, "Training images over all ranks (ImageNet has 1,281,167).", "override", ge=1, le=1_281_167
    )
    val_samples: int = knob(
        1024, "Validation images over all ranks (ImageNet has 50,000).", "override", ge=1, le=50_000
    )
    image_size: int = knob(224, "Image height and width (the model's input).", "override", ge=32, le=1024)
    num_classes: int = knob(1000, "Classes (ImageNet has 1,000).", "override", ge=2, le=1000)
    noise: float = knob(
        48.0, "Per-pixel noise, a standard deviation on the 0-255 scale.", "override", ge=0, le=255
    )
    seed: int = _seed()


@dataclass(frozen=True)
class ImageNetFileOptions(DataOptions):
    """Task 1b's prepared ImageNet (``data: path``): how the JPEG files are decoded."""

    TASK: ClassVar[str] = "1b"
    SOURCE: ClassVar[str] = "path"

    decoder: Literal["auto", "cpu", "gpu"] = knob(
        "auto",
        "Where JPEGs are decoded: gpu (torchvision's nvJPEG decoder), cpu (Pillow in loader "
        "processes), or auto: gpu when the rank has one and torchvision, else cpu.",
        "override",
    )
    loader_workers: int | None = knob(
        None,
        "Loader processes per rank; default the rank's CPU threads (0: decode in the rank).",
        "override",
        ge=0,
        le=64,
    )
    prefetch_batches: int = knob(2, "Batches each loader process prepares ahead.", "override", ge=1, le=64)


@dataclass(frozen=True)
class ImageNetDownloadOptions(ImageNetFileOptions):
    """Task 1b's ImageNet from the official archives (``data: download``): decoded as a path's."""

    SOURCE: ClassVar[str] = "download"


DATA_OPTIONS: Mapping[tuple[str, str], type[DataOptions]] = MappingProxyType(
    {
        (cls.TASK, cls.SOURCE): cls
        for cls in (
            Cifar10Synthetic,
            SyntheticImageOptions,
            ImageNetFileOptions,
            ImageNetDownloadOptions,
            EpsilonSynthetic,
            WikiText2Synthetic,
            GnmtSynthetic,
            TransformerSynthetic,
        )
    }
)
"""(task id, data source) -> the options it takes; a pair not here takes none."""

OptionsT = TypeVar("OptionsT", bound=DataOptions)


def options_class(task: str, source: str) -> type[DataOptions]:
    """The options task ``task`` takes from source ``source`` (``DataOptions``: none)."""
    return DATA_OPTIONS.get((task, source), DataOptions)


def check_data_options(
    task: str, source: str, values: Mapping[str, Any]
) -> tuple[DataOptions, list[HyperparameterProblem]]:
    """``values`` checked against what ``task`` takes from ``source``: the typed options (problems
    left at their defaults) and every problem, each naming its option."""
    cls = options_class(task, source)
    where = f"task {task} ({source} data)"
    if cls is DataOptions:
        return cls(), [
            HyperparameterProblem(name, f"{where} takes no data options", at_key=True, hint="remove it")
            for name in values
        ]
    typed, problems = check_values(cls, where, values, frozenset({"override"}), what=OPTION)
    bad = {p.name for p in problems}
    made = cls(**{k: v for k, v in typed.items() if k not in bad})
    return made, [*problems, *made.problems()]


def parse_data_options(task: str, source: str, values: Mapping[str, Any]) -> DataOptions:
    """The typed options of a rank's config; ``HyperparameterError`` names every problem."""
    made, problems = check_data_options(task, source, values)
    if problems:
        raise HyperparameterError(task, problems)
    return made


def options_document(options: DataOptions) -> dict[str, Any]:
    """The options that differ from their defaults, as JSON data (what a spec wrote)."""
    return {
        f.name: getattr(options, f.name)
        for f in dataclasses.fields(options)
        if getattr(options, f.name) != f.default
    }


def options_of(options: DataOptions, cls: type[OptionsT]) -> OptionsT:
    """``options`` as the class a task reads (a rank's config parsed them for its task)."""
    if isinstance(options, cls):
        return options
    if type(options) is DataOptions:  # a source without options (real data): the defaults
        return cls()
    raise TypeError(f"{type(options).__name__} options are not {cls.__name__}")
