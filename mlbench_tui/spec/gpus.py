"""The GPU models a spec (and ``mlbench cluster create --gpu``) may name, and typo hints for them.

One catalog for the whole product: the clouds' price table (``mlbench_tui/clusters/prices.json``)
offers a subset of it, and the worker compares each rank's device name with the model asked for
(``mlbench_worker.devices.placement.model_matches``: every word of the model must be a word of the
device's name, so ``A100-80GB`` matches ``NVIDIA A100-SXM4-80GB`` and ``T4`` matches ``Tesla
T4``, while ``L4`` does not match ``NVIDIA L40S``).
"""

from __future__ import annotations

import difflib
import re

# NVIDIA's data-centre GPUs as people name them; the clouds' machine shapes come with these.
GPU_MODELS: tuple[str, ...] = (
    "T4",
    "L4",
    "A10G",
    "P4",
    "P100",
    "V100",
    "A100",
    "A100-80GB",
    "H100",
    "H200",
)

# Characters a model name is mistyped with: a letter O for a zero, an I or l for a one.
_LOOKALIKES = str.maketrans({"O": "0", "I": "1", "L": "1"})


def _key(name: str) -> str:
    """``name`` upper-cased without separators or a vendor prefix (``nvidia-tesla-t4`` -> ``T4``)."""
    text = re.sub(r"[^A-Z0-9]", "", name.upper())
    for prefix in ("NVIDIA", "TESLA"):
        text = text.removeprefix(prefix)
    return text


def canonical_gpu_model(name: str) -> str | None:
    """The catalog's spelling of ``name`` when they differ only in case, separators or a vendor
    prefix (``h100`` -> ``H100``, ``a100_80gb`` -> ``A100-80GB``); None for other names."""
    key = _key(name)
    return next((model for model in GPU_MODELS if _key(model) == key), None)


def suggest_gpu_model(name: str) -> str | None:
    """The catalog model ``name`` most likely meant (``H1OO`` -> ``H100``), or None."""
    keys = {_key(model): model for model in GPU_MODELS}
    looks = {key.translate(_LOOKALIKES): model for key, model in keys.items()}
    typed = _key(name)
    if typed.translate(_LOOKALIKES) in looks:
        return looks[typed.translate(_LOOKALIKES)]
    match = difflib.get_close_matches(typed, list(keys), n=1, cutoff=0.6)
    return keys[match[0]] if match else None
