"""A rank's hardware in a spec: CPU, memory, GPUs (count and model) and precision.

The GPU model is checked against the catalog (``spec.gpus``) with a hint for a typo; ``gpu: 1xT4``
and a bare count are short forms of ``{count, type, strict}``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema, field_validator, model_validator
from pydantic_core import PydanticCustomError

from mlbench_tui.spec.base import StrictModel
from mlbench_tui.spec.gpus import GPU_MODELS, canonical_gpu_model, suggest_gpu_model
from mlbench_tui.spec.limits import MAX_GPUS_PER_RANK
from mlbench_tui.spec.shortforms import GPU_RE, CpuQuantity, MemoryQuantity, parse_gpu, show_value

_GPU_TYPE_DOC = f"GPU model, one of {', '.join(GPU_MODELS)} (case and separators are free: 'h100')."


class Gpu(StrictModel):
    """GPUs per rank, and which model they must be."""

    count: int = Field(default=1, ge=0, le=MAX_GPUS_PER_RANK, description="GPUs per rank.")
    type: str | None = Field(default=None, description=_GPU_TYPE_DOC)
    strict: bool = Field(
        default=True,
        description="With a type: every rank checks at start that its GPU is that model and fails the "
        "run when it is not, so a result labelled A100 never ran on a T4. false: the type is a label, "
        "any GPU runs; the environment fingerprint still records each rank's model.",
    )

    @model_validator(mode="after")
    def _typed_needs_a_gpu(self) -> Gpu:
        if self.count == 0 and self.type is not None:
            raise PydanticCustomError(
                "gpu_count",
                "gpu type {type} with count 0: a GPU model needs at least one GPU per rank; remove "
                "hardware.gpu for a CPU run",
                {"type": show_value(self.type)},
            )
        return self

    @field_validator("type")
    @classmethod
    def _known_model(cls, value: str | None) -> str | None:
        if value is None:
            return None
        canonical = canonical_gpu_model(value)
        if canonical is not None:
            return canonical
        suggestion = suggest_gpu_model(value)
        raise PydanticCustomError(
            "gpu_model",
            "unknown GPU model {value}: expected one of {expected}",
            {
                "value": show_value(value),
                "expected": ", ".join(GPU_MODELS),
                "hint": f"did you mean '{suggestion}'?"
                if suggestion
                else "give only a count (gpu: 1) to run on any GPU",
            },
        )


GpuField = Annotated[
    Gpu,
    BeforeValidator(parse_gpu),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": MAX_GPUS_PER_RANK},
                {"type": "string", "pattern": GPU_RE.pattern},
                {
                    "type": "object",
                    "title": "Gpu",
                    "properties": {
                        "count": {
                            "type": "integer",
                            "minimum": 0,
                            "maximum": MAX_GPUS_PER_RANK,
                            "description": "GPUs per rank.",
                        },
                        "type": {"type": "string", "description": _GPU_TYPE_DOC},
                        "strict": {
                            "type": "boolean",
                            "default": True,
                            "description": "Fail the run when a rank's GPU is not this type (default); "
                            "false: the type is a label only.",
                        },
                    },
                    "additionalProperties": False,
                },
            ],
            "examples": ["1xT4", "2xA100", 1, {"count": 1, "type": "A100", "strict": False}],
        }
    ),
]


class Hardware(StrictModel):
    """Resources of each rank, how many ranks share a node, and the numeric precision of training."""

    cpu: CpuQuantity | None = Field(
        default=None,
        description="CPU per rank as a Kubernetes quantity ('2', '500m'). Sets the intra-op threads per "
        "rank (ceil of the cores, at least 1); when unset each rank uses 1 thread.",
    )
    memory: MemoryQuantity | None = Field(default=None, description="Memory per rank, e.g. '12Gi'.")
    gpu: GpuField | None = Field(
        default=None,
        description="GPUs per rank: '1xT4', 'T4', a count, or {count, type, strict}. Unset: CPU only. "
        "Rank i uses GPU LOCAL_RANK of those visible to its machine (CUDA_VISIBLE_DEVICES honoured).",
    )
    ranks_per_node: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Ranks placed together on one node, each with its own GPU(s), e.g. a node's GPU count: "
        "on Kubernetes they share one pod (torchrun --nproc-per-node starts them, so NCCL uses NVLink and "
        "shared memory between them); on Slurm it is the tasks per node. World sizes above it must be "
        "multiples of it; smaller ones run on one node. Unset: one rank per pod on Kubernetes, "
        "target.tasks_per_node on Slurm. Local runs put every rank on this machine.",
    )
    precision: Literal["fp32", "bf16", "fp16", "amp"] = Field(
        default="fp32",
        description="Training precision where the task allows it: fp32, bf16, fp16 (GPU only) or amp "
        "(autocast with loss scaling).",
    )

    @property
    def gpus(self) -> int:
        """GPUs per rank (0 when unset)."""
        return self.gpu.count if self.gpu else 0
