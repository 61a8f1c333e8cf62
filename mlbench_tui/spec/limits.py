"""Every limit a spec must keep, declared once: the spec checks them at ``validate`` and the store,
the HTTP API and the renderers import the same numbers (the telemetry interval's bounds come from
the worker's wire, which the ranks check), so what validate accepts the targets take.

Durations are seconds. The largest one (a year) is far below what every consumer can hold:
Slurm's ``--time`` (minutes in 32 bits), Kubernetes' ``activeDeadlineSeconds`` (int64) and the
largest timeout a Python thread can wait (``threading.TIMEOUT_MAX``).
"""

from __future__ import annotations

from mlbench_worker.config import MAX_TELEMETRY_INTERVAL_S as MAX_TELEMETRY_INTERVAL_S
from mlbench_worker.config import MIN_TELEMETRY_INTERVAL_S as MIN_TELEMETRY_INTERVAL_S

MAX_SPEC_BYTES = 256 * 1024  # one spec file or stdin, checked before parsing; also the store's spec_text
MAX_YAML_DEPTH = 32  # nested collections; a spec needs 5
MAX_YAML_NODES = 2_000  # YAML nodes per file, aliases expanded (guards against "billion laughs")
MAX_ISSUES = 100  # problems reported per file; more are summed up in one line

MAX_DURATION_S = 365 * 86400.0  # max_time, a grace, any duration
MIN_MAX_TIME_S = 1.0  # a run's max_time: less would stop it before its first step
# MIN_TELEMETRY_INTERVAL_S and MAX_TELEMETRY_INTERVAL_S are the wire's: the ranks check them too
MAX_SLURM_GRACE_S = 86400.0
SLURM_MAX_TIME_MINUTES = 2**32 - 3  # Slurm's INFINITE and NO_VAL sit just above
MAX_PRICE = 1e9  # per hour or per kWh, in any currency
MAX_CPU_CORES = 4096.0
MAX_MEMORY_BYTES = 2**60  # one exbibyte per rank: beyond any node, still an int64 for Kubernetes
MIN_MEMORY_BYTES = 64 * 2**20  # a rank's interpreter alone takes more
MIN_CPU_CORES = 0.001  # Kubernetes' smallest CPU unit (1m)
MAX_GPUS_PER_RANK = 16
MAX_SEED = 2**31 - 1  # spec.seed, and seed + repeat of every repeat
MAX_DESCRIPTION = 2000  # characters of metadata.description ("a sentence or two")
MAX_IMAGE_REFERENCE = 512  # an image reference (its name alone is at most 255)
MAX_RUNS = 1000  # runs one validate, plan or apply takes unless --max-runs says more
MAX_TOLERATION_SECONDS = 2**31 - 1
