"""Task 1b's ``data.options``, per data source, declared once (stdlib only, like the hyperparameters).

Each source's options are a frozen dataclass whose fields carry a ``Knob`` (description, bounds):
the engine checks a spec's options against them at validation and the worker parses them with
the same code (``data.option_checks``), so a value validate accepts is a value the ranks accept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mlbench_worker.data import option_checks
from mlbench_worker.knobs import knob

MAX_SYNTHETIC_SAMPLES = 2**31 - 1


@dataclass(frozen=True)
class SyntheticImageOptions:
    """``data: synthetic``: a learnable stand-in generated on the rank's device from a fixed seed
    (one random low-frequency prototype per class plus per-image noise)."""

    train_samples: int = knob(8192, "Training images (over all ranks).", ge=1, le=MAX_SYNTHETIC_SAMPLES)
    val_samples: int = knob(1024, "Validation images (over all ranks).", ge=1, le=MAX_SYNTHETIC_SAMPLES)
    image_size: int = knob(224, "Image height and width (the model's input).", ge=32, le=1024)
    num_classes: int = knob(1000, "Classes.", ge=2, le=100_000)
    noise: float = knob(48.0, "Per-pixel noise standard deviation (0-255 scale).", ge=0, le=255)
    seed: int = knob(0, "Seed of the prototypes, labels and noise.", ge=0, le=2**31 - 1)


@dataclass(frozen=True)
class ImageNetFileOptions:
    """``data: path`` or ``download``: how the JPEG files are decoded."""

    decoder: Literal["auto", "cpu", "gpu"] = knob(
        "auto",
        "Where JPEGs are decoded: gpu (torchvision's nvJPEG decoder), cpu (Pillow in loader "
        "processes), or auto: gpu when the rank has one and torchvision, else cpu.",
    )
    loader_workers: int | None = knob(
        None,
        "Loader processes per rank; default the rank's CPU threads (0: decode in the rank).",
        ge=0,
        le=64,
    )
    prefetch_batches: int = knob(2, "Batches each loader process prepares ahead.", ge=1, le=64)


ImageNetOptions = SyntheticImageOptions | ImageNetFileOptions
OPTIONS_BY_SOURCE: Mapping[str, type[SyntheticImageOptions] | type[ImageNetFileOptions]] = {
    "synthetic": SyntheticImageOptions,
    "path": ImageNetFileOptions,
    "download": ImageNetFileOptions,
}


def parse_options(source: str, values: Mapping[str, Any]) -> ImageNetOptions:
    """The typed options of ``source`` (defaults for the rest); ``HyperparameterError`` names every
    unknown option, wrong type and out-of-range value."""
    return option_checks.parse_options(OPTIONS_BY_SOURCE[source], f"1b's data source '{source}'", values)
