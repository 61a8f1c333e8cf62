"""Task 1a in TensorFlow: ResNet-20 on CIFAR-10 with ``tf.distribute.MultiWorkerMirroredStrategy``.

The same task as ``tasks/resnet20.py`` (batch 128 per worker, LR 0.02*k with linear warm-up over
``warmup_epochs``, reduce-on-plateau of the validation loss, SGD momentum 0.9 nesterov, weight
decay 1e-4, disjoint equal shards per worker, global validation metrics) so ``mlbench results``
compares the frameworks on one spec. It runs on what the PyTorch tasks run on: the shared training
loop (``tasks.training``: epochs, phases, reports, goal and time checks, stopping together), the
shared LR schedule (``optim.schedules.WarmupPlateau``) and the shared rank lifecycle
(``rank_run``: init_start, run_stop with the exit status, rank_failed); this module is only the
TensorFlow trainer, its context and its cluster. Each worker is a plain process; the cluster comes
from ``TF_CONFIG`` (set by the local executor) or is built from ``MLBENCH_TF_WORKERS``
(comma-separated ``host:port`` list, one per rank, set by the Kubernetes manifests) and this
process's rank.

A step runs as three compiled functions so the tracker can split compute from communication
the way MLBench's phase names do: forward, loss and backward run fused in one ``tf.function``
(charged to ``backprop``; ``fwd_pass`` and ``comp_loss`` are not separable in TensorFlow), the
gradient all-reduce (``agg``, one packed ring all-reduce), and the optimizer update
(``opt_step``). TensorFlow is imported lazily: the rest of the worker never needs it, and this
module imports no torch.
"""

from __future__ import annotations

import json
import os
import pickle
import platform
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlbench_worker import hyperparams as hps
from mlbench_worker import rank_env, wire
from mlbench_worker.config import ConfigError, WorkerConfig
from mlbench_worker.data.options import Cifar10Synthetic, options_of
from mlbench_worker.launch.allocator import tune_host_allocator
from mlbench_worker.optim.schedules import WarmupPlateau
from mlbench_worker.rank_context import RankContext
from mlbench_worker.rank_run import RankRun
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.tasks.training import HostStep, HostSums, run_training
from mlbench_worker.timing.startup import CLOCK
from mlbench_worker.timing.tracker import Record, Tracker

if TYPE_CHECKING:
    from mlbench_worker.context import ReporterLike
    from mlbench_worker.launch.rendezvous import Rendezvous

MEAN = np.array([125.3, 123.0, 113.9], dtype=np.float32)
STD = np.array([63.0, 62.1, 66.7], dtype=np.float32)


# --------------------------------------------------------------------------- cluster


def tf_config(env: Mapping[str, str], rank: int, world_size: int) -> dict[str, Any]:
    """The ``TF_CONFIG`` document for this rank: the given one, or one built from MLBENCH_TF_WORKERS."""
    raw = env.get(rank_env.TF_CONFIG)
    if raw:
        try:
            doc = json.loads(raw)
            workers = doc["cluster"]["worker"]
            index = int(doc["task"]["index"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"TF_CONFIG is not a valid cluster description: {exc}") from None
    else:
        listed = env.get(rank_env.TF_WORKERS, "")
        workers = [w.strip() for w in listed.split(",") if w.strip()]
        if not workers and world_size == 1:
            return {}
        if not workers:
            raise ConfigError("a tensorflow rank needs TF_CONFIG or MLBENCH_TF_WORKERS (host:port per rank)")
        index = rank
        doc = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
    if len(workers) != world_size:
        raise ConfigError(f"the TensorFlow cluster has {len(workers)} workers but the run plans {world_size}")
    if not 0 <= index < world_size:
        raise ConfigError(f"TF_CONFIG task index {index} is outside 0..{world_size - 1}")
    return dict(doc)


# --------------------------------------------------------------------------- data (numpy only)


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    from mlbench_worker.data.fetch import DatasetError

    try:
        with path.open("rb") as fh:
            doc = pickle.load(fh, encoding="bytes")
        images = np.asarray(doc[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        labels = np.asarray(doc[b"labels"], dtype=np.int64)
    except (OSError, KeyError, ValueError, pickle.UnpicklingError, EOFError) as exc:
        raise DatasetError(f"{path}: not a CIFAR-10 python batch ({exc})") from None
    return images, labels


def load_cifar10_numpy(root: Path) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Train and test sets as NHWC uint8 images and int labels from the python batches."""
    from mlbench_worker.data.fetch import DatasetError

    candidates = [root, root / "cifar-10-batches-py"]
    directory = next((d for d in candidates if (d / "test_batch").is_file()), None)
    if directory is None:
        raise DatasetError(
            f"{root} holds no CIFAR-10 python batches; run: mlbench data prepare cifar10 --dir {root}"
        )
    parts = [_read_batch(directory / f"data_batch_{i}") for i in range(1, 6)]
    train = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return train, _read_batch(directory / "test_batch")


def synthetic_cifar(
    train: int, val: int, *, seed: int = 0, noise: float = 48.0
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """CIFAR-shaped learnable images: a fixed low-frequency prototype per class plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    prototypes = rng.uniform(40, 215, size=(10, 4, 4, 3))
    prototypes = prototypes.repeat(8, axis=1).repeat(8, axis=2)

    def make(n: int) -> tuple[np.ndarray, np.ndarray]:
        labels = rng.integers(0, 10, size=n)
        images = prototypes[labels] + rng.normal(0.0, noise, size=(n, 32, 32, 3))
        return np.clip(images, 0, 255).astype(np.uint8), labels.astype(np.int64)

    return make(train), make(val)


def load_data(
    config: WorkerConfig, local_rank: int
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    data = config.data
    if data.source == "synthetic":
        opts = options_of(data.options, Cifar10Synthetic)
        return synthetic_cifar(opts.train_samples, opts.val_samples, seed=opts.seed, noise=opts.noise)
    from mlbench_worker.data.fetch import default_data_dir

    root = Path(data.path) if data.path else default_data_dir() / "cifar10"
    if data.source == "download":
        deadline = time.monotonic() + 3600
        if local_rank == 0:
            from mlbench_worker.data import cifar10  # the download code (and its checksums) live there

            root.mkdir(parents=True, exist_ok=True)
            cifar10.download(root)
        while not (root / "cifar-10-batches-py" / "test_batch").is_file() and time.monotonic() < deadline:
            time.sleep(1.0)  # other ranks wait for local rank 0's download
    return load_cifar10_numpy(root)


def shard(n: int, rank: int, world: int, seed: int) -> np.ndarray:
    """This rank's disjoint, equally sized share of a seeded permutation (as the PyTorch task)."""
    per = n // world
    return np.random.default_rng(seed).permutation(n)[rank * per : (rank + 1) * per]


# --------------------------------------------------------------------------- model


def build_resnet20(keras: Any, num_classes: int = 10) -> Any:
    """ResNet-20 v1 for 32x32 inputs: 3 stages x 3 basic blocks (16/32/64 filters), projection
    shortcuts where the shape changes (as the PyTorch task), global pooling, a dense classifier."""
    layers = keras.layers

    def bn() -> Any:  # PyTorch's BatchNorm2d defaults (running-average momentum 0.1, eps 1e-5)
        return layers.BatchNormalization(momentum=0.9, epsilon=1e-5)

    def conv(filters: int, kernel: int, stride: int) -> Any:
        return layers.Conv2D(
            filters, kernel, strides=stride, padding="same", use_bias=False, kernel_initializer="he_normal"
        )

    inputs = keras.Input((32, 32, 3))
    x = layers.ReLU()(bn()(conv(16, 3, 1)(inputs)))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(3):
            stride = 2 if stage > 0 and block == 0 else 1
            y = layers.ReLU()(bn()(conv(filters, 3, stride)(x)))
            y = bn()(conv(filters, 3, 1)(y))
            shortcut = x
            if stride != 1 or x.shape[-1] != filters:
                shortcut = bn()(conv(filters, 1, stride)(x))
            x = layers.ReLU()(layers.Add()([y, shortcut]))
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(num_classes, dtype="float32")(x)
    return keras.Model(inputs, outputs, name="resnet20")


# --------------------------------------------------------------------------- the trainer


class StrategySum:
    """Sums over every worker through the strategy's collective; the stop decision's
    ``goals.Collective`` (rank 0's value shared as a sum with every other worker's 0)."""

    def __init__(self, tf: Any, strategy: Any, rank: int, world_size: int) -> None:
        self.tf, self.strategy = tf, strategy
        self.rank, self.world_size = rank, world_size

    def sum(self, values: list[float]) -> list[float]:
        """Sum of ``values`` over all workers (identical result everywhere)."""
        if self.world_size == 1:
            return list(values)
        tf = self.tf
        tensor = tf.constant(values, dtype=tf.float64)
        # A plain tensor counts as this worker's value; MWMS reduces it across workers.
        reduced = self.strategy.reduce(tf.distribute.ReduceOp.SUM, tensor, axis=None)
        return [float(v) for v in reduced.numpy()]

    def share_from_rank0(self, value: int) -> int:
        return round(self.sum([float(value) if self.rank == 0 else 0.0])[0])


@dataclass
class TensorFlowContext(RankContext):
    """A TensorFlow rank's context: ``comm`` is its strategy's ``StrategySum``, ``device`` the
    configured one ("cpu" or "cuda")."""

    comm: StrategySum


class TensorFlowTrainer:
    """One worker's training for the shared loop (``tasks.training.LoopTrainer``): the data
    pipeline, the model and the compiled step functions on the worker's strategy."""

    comm_precision = "fp32"  # the flat fp32 buffer

    def __init__(self, ctx: TensorFlowContext, strategy: Any) -> None:
        import tensorflow as tf

        self.tf, self.ctx, self.strategy = tf, ctx, strategy
        config = ctx.config
        self.rank, self.world = ctx.rank, config.world_size
        hp = config.hyperparameters
        if not isinstance(hp, hps.ResNet20):
            raise ConfigError(f"task {config.task} is not 1a: tensorflow runs ResNet-20 only")
        self.hp = hp
        self.batch_size = hp.batch_size
        if config.precision == "bf16":
            tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
        elif config.precision != "fp32":
            raise ConfigError(
                f"precision {config.precision!r} is not implemented for tensorflow; use fp32 or bf16"
            )
        (x_train, y_train), (x_val, y_val) = load_data(config, ctx.rendezvous.local_rank)
        self.train_samples, self.eval_samples = len(y_train), len(y_val)  # MLPerf's sample counts
        idx = shard(len(y_train), self.rank, self.world, config.seed)
        lo, hi = len(y_val) * self.rank // self.world, len(y_val) * (self.rank + 1) // self.world
        self.train_x, self.train_y = x_train[idx], y_train[idx]
        self.val_x, self.val_y = x_val[lo:hi], y_val[lo:hi]
        self.steps_per_epoch = -(-len(self.train_y) // self.batch_size)
        CLOCK.mark("data")
        with strategy.scope():
            tf.keras.utils.set_random_seed(config.seed)  # identical initial weights on every worker
            self.model = build_resnet20(tf.keras)
            self.variables = list(self.model.trainable_variables)
            self.buffers = [
                tf.Variable(tf.zeros(v.shape, dtype=v.dtype), trainable=False) for v in self.variables
            ]
            total = sum(int(np.prod(v.shape)) for v in self.variables)
            self.flat = tf.Variable(tf.zeros([total]), trainable=False)  # where the all-reduce lands
        self.lr_variable = tf.Variable(0.0, trainable=False, dtype=tf.float32)
        self._compile()
        self.schedule = WarmupPlateau(
            base_lr=hp.base_lr if hp.base_lr is not None else hp.lr / self.world,
            target_lr=hp.lr,
            warmup_epochs=hp.warmup_epochs,
            steps_per_epoch=self.steps_per_epoch,
            patience=hp.plateau_patience,
            factor=hp.plateau_factor,
        )

    def _compile(self) -> None:
        tf = self.tf
        model, variables, buffers, strategy = self.model, self.variables, self.buffers, self.strategy
        momentum, nesterov, wd = self.hp.momentum, self.hp.nesterov, self.hp.weight_decay
        mean, std = tf.constant(MEAN), tf.constant(STD)

        def normalize(x: Any) -> Any:
            return (tf.cast(x, tf.float32) - mean) / std

        @tf.function
        def grads_step(x: Any, y: Any) -> Any:
            def fn(x: Any, y: Any) -> Any:
                with tf.GradientTape() as tape:
                    logits = tf.cast(model(normalize(x), training=True), tf.float32)
                    loss = tf.reduce_mean(
                        tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                    )
                grads = tape.gradient(loss, variables)
                correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, -1), y), tf.float32))
                return loss, correct, grads

            return strategy.run(fn, args=(x, y))

        sizes = [int(np.prod(v.shape)) for v in variables]
        shapes = [tuple(v.shape) for v in variables]

        @tf.function
        def aggregate(grads: Any) -> Any:
            # One flat buffer, one ring all-reduce (TensorFlow reduces a list tensor by tensor).
            flat = tf.concat([tf.reshape(tf.cast(g, tf.float32), [-1]) for g in grads], 0)
            (reduced,) = strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.MEAN, [(flat, self.flat)])
            return reduced

        @tf.function
        def apply(grads: Any) -> None:
            def fn(flat: Any) -> None:
                lr = self.lr_variable
                pieces = tf.split(flat, sizes)
                grads = [tf.reshape(p, shape) for p, shape in zip(pieces, shapes, strict=True)]
                for v, buf, g in zip(variables, buffers, grads, strict=True):
                    g = tf.cast(g, v.dtype) + wd * v
                    buf.assign(momentum * buf + g)
                    v.assign_sub(lr * (g + momentum * buf if nesterov else buf))

            strategy.run(fn, args=(grads,))

        @tf.function
        def eval_step(x: Any, y: Any) -> Any:
            logits = tf.cast(model(normalize(x), training=False), tf.float32)
            loss = tf.reduce_sum(tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
            correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, -1), y), tf.float32))
            return tf.stack([loss, correct, tf.cast(tf.shape(y)[0], tf.float32)])

        self.grads_step, self.aggregate, self.apply, self.eval_step = grads_step, aggregate, apply, eval_step

    # -- what the shared loop drives ---------------------------------------------------------
    @property
    def lr(self) -> float:
        return self.schedule.lr

    def train_batches(self, epoch: int) -> Iterator[tuple[Any, Any, int]]:
        """This worker's augmented batches of ``epoch`` as tensors: ``(x, y, size)``."""
        config = self.ctx.config
        rng = np.random.default_rng((config.seed, self.rank, epoch))
        order = np.random.default_rng((config.seed, epoch, self.rank)).permutation(len(self.train_y))
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            x = self.tf.constant(self._augment(self.train_x[idx], rng))
            yield x, self.tf.constant(self.train_y[idx]), len(idx)

    def _augment(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Random 4-pixel-padded crop and horizontal flip (the PyTorch task's augmentation)."""
        n = len(x)
        padded = np.pad(x, ((0, 0), (4, 4), (4, 4), (0, 0)), mode="reflect")
        dx, dy = rng.integers(0, 9, n), rng.integers(0, 9, n)
        rows = dy[:, None] + np.arange(32)[None, :]
        cols = dx[:, None] + np.arange(32)[None, :]
        out: np.ndarray = padded[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]
        flip = rng.random(n) < 0.5
        out[flip] = out[flip, :, ::-1]
        return out

    def before_step(self, step: int) -> None:
        self.lr_variable.assign(self.schedule.on_step(step))

    def train_step(self, batch: tuple[Any, Any, int], record: Record | None) -> HostStep:
        x, y, n = batch
        if record:
            record("batch_load")
        loss, correct, grads = self.grads_step(x, y)
        loss_value = float(loss)  # waits for the fused forward/backward
        if record:
            record("backprop")
        reduced = self.aggregate(grads)  # tf.functions run synchronously on the CPU
        if record:
            record("agg")
        self.apply(reduced)
        if record:
            record("opt_step")
        result = HostStep(loss_value, n, float(correct))
        if record:
            record("comp_metrics")
        return result

    def validate(self) -> dict[str, float]:
        sums = np.zeros(3)
        for start in range(0, len(self.val_y), 500):
            x, y = self.val_x[start : start + 500], self.val_y[start : start + 500]
            sums += self.eval_step(self.tf.constant(x), self.tf.constant(y)).numpy()
        loss_sum, correct, count = self.ctx.comm.sum(list(sums))
        return {
            wire.VAL_GLOBAL_LOSS: loss_sum / max(count, 1.0),
            wire.VAL_GLOBAL_PREC1: 100.0 * correct / max(count, 1.0),
        }

    def after_validation(self, epoch: int, metrics: dict[str, float], step: int) -> None:
        before = self.schedule.lr
        lr = self.schedule.on_validation(metrics[wire.VAL_GLOBAL_LOSS], step)
        if lr != before:
            self.ctx.log(f"learning rate -> {lr:g} (validation loss plateau)")

    def train_mode(self) -> None:
        return None  # the step passes training=True itself

    def window_sums(self) -> HostSums:
        return HostSums()

    def synchronize(self) -> None:
        return None  # each step's loss is read on the host

    def memory_peak_gib(self) -> float | None:
        return None


def fingerprint(config: WorkerConfig, rdv: Rendezvous) -> dict[str, Any]:
    """The environment of a TensorFlow run (framework and versions for ``mlbench results``)."""
    import tensorflow as tf

    return {
        "framework": "tensorflow",
        "tensorflow": tf.__version__,
        "keras": getattr(tf.keras, "__version__", None) or _version("keras"),
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "backend": config.backend,
        "backend_version": "tf.distribute MultiWorkerMirroredStrategy "
        + ("NCCL" if config.backend == "nccl" else "RING"),
        "launcher": rdv.launcher,
        "world_size": config.world_size,
        "threads_per_rank": config.threads_per_rank,
        "hostname": platform.node(),
    }


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def run_rank(config: WorkerConfig, rdv: Rendezvous, reporter: ReporterLike) -> int:
    """The TensorFlow counterpart of ``mlbench_worker.__main__.run_rank``: the same lifecycle
    (``rank_run``), events and exits, the shared loop."""
    run = RankRun(reporter, rdv.rank)

    def task() -> Outcome:
        if config.task != "1a":
            raise ConfigError(f"task {config.task!r} has no tensorflow implementation (only 1a)")
        rank = rdv.rank
        allocator = tune_host_allocator(config.implementation.host_allocator, os.environ)
        doc = tf_config(os.environ, rank, config.world_size)
        if doc:
            os.environ[rank_env.TF_CONFIG] = json.dumps(doc)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        threads = config.threads_per_rank
        os.environ[rank_env.OMP_NUM_THREADS] = str(threads)
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(max(2, threads))
        if config.device == "cpu":
            tf.config.set_visible_devices([], "GPU")
        CLOCK.mark("imports")
        if rank == 0:
            facts = {**fingerprint(config, rdv), "host_allocator": allocator}
            wire.emit(reporter, wire.Environment(facts=facts))
        implementation = tf.distribute.experimental.CommunicationImplementation
        comm = implementation.NCCL if config.backend == "nccl" else implementation.RING
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(implementation=comm)
        )
        if strategy.num_replicas_in_sync != config.world_size:
            raise ConfigError(
                f"TensorFlow sees {strategy.num_replicas_in_sync} replicas, the run plans {config.world_size}"
            )
        CLOCK.mark("rendezvous")
        collective = StrategySum(tf, strategy, rank, config.world_size)
        ctx = TensorFlowContext(config, rdv, collective, config.device, reporter)
        trainer = TensorFlowTrainer(ctx, strategy)
        ctx.log(
            f"training 1a (tensorflow) on {config.world_size} worker(s), "
            f"{trainer.steps_per_epoch} steps/epoch, batch {trainer.batch_size}, lr "
            f"{trainer.schedule.base_lr:g} -> {trainer.schedule.target_lr:g} over "
            f"{trainer.hp.warmup_epochs:g} epoch(s)",
            all_ranks=True,
        )
        # the shared tracker on its CPU clock (TensorFlow's steps are synchronised by the host
        # reading their results): the same phases, sampling and train/validation times as torch's
        tracker = Tracker(seed=config.seed * 1009 + rank)
        return run_training(ctx, trainer, max_epochs=trainer.hp.max_epochs, tracker=tracker)

    return run.run(task)
