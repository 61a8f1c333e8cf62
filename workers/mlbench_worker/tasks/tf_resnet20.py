"""Task 1a in TensorFlow: ResNet-20 on CIFAR-10 with ``tf.distribute.MultiWorkerMirroredStrategy``.

The same task as ``tasks/resnet20.py`` (batch 128 per worker, LR 0.02*k with linear warm-up over
``warmup_epochs``, reduce-on-plateau of the validation loss, SGD momentum 0.9 nesterov, weight
decay 1e-4, disjoint equal shards per worker, global validation metrics) so ``mlbench results``
compares the frameworks on one spec. Each worker is a plain process; the cluster comes from
``TF_CONFIG`` (set by the local executor) or is built from ``MLBENCH_TF_WORKERS`` (comma-separated
``host:port`` list, one per rank, set by the Kubernetes manifests) and this process's rank.

A step runs as three compiled functions so the tracker can split compute from communication
the way MLBench's phase names do: forward, loss and backward run fused in one ``tf.function``
(charged to ``backprop``; ``fwd_pass`` and ``comp_loss`` are not separable in TensorFlow), the
gradient all-reduce (``agg``, one packed ring all-reduce), and the optimizer update
(``opt_step``). TensorFlow is imported lazily: the rest of the worker never needs it, and this
module imports no torch.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import platform
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlbench_worker import hyperparams as hps
from mlbench_worker import rank_env, wire
from mlbench_worker.allocator import tune_host_allocator
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.tracker import Tracker
from mlbench_worker.wire import ConfigError, WorkerConfig

if TYPE_CHECKING:
    from mlbench_worker.context import Rendezvous, ReporterLike

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
        opts = data.options
        return synthetic_cifar(
            int(opts.get("train_samples", 4096)),
            int(opts.get("val_samples", 512)),
            seed=int(opts.get("seed", 0)),
            noise=float(opts.get("noise", 48.0)),
        )
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


# --------------------------------------------------------------------------- schedule and timing


class Schedule:
    """Linear warm-up per step to the scaled LR, then reduce-on-plateau of the validation loss."""

    def __init__(self, base: float, target: float, warmup_steps: int, patience: int, factor: float) -> None:
        self.base, self.target, self.warmup_steps = base, target, warmup_steps
        self.patience, self.factor = patience, factor
        self.after = target
        self.best = math.inf
        self.bad = 0
        self.lr = base if warmup_steps > 0 else target

    def on_step(self, step: int) -> float:
        if step < self.warmup_steps:
            self.lr = self.base + (self.target - self.base) * (step + 1) / self.warmup_steps
        else:
            self.lr = self.after
        return self.lr

    def on_validation(self, loss: float, step: int) -> float:
        if loss < self.best - 0.01:
            self.best, self.bad = loss, 0
        elif step >= self.warmup_steps:
            self.bad += 1
            if self.bad > self.patience:
                self.after, self.bad = self.after * self.factor, 0
                self.lr = self.after
        return self.lr


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


# --------------------------------------------------------------------------- the run


class TensorFlowRun:
    """One worker's training: strategy, model, data pipeline, compiled step functions."""

    def __init__(self, config: WorkerConfig, rdv: Rendezvous, reporter: ReporterLike) -> None:
        import tensorflow as tf

        self.tf = tf
        self.config, self.rdv, self.reporter = config, rdv, reporter
        self.rank, self.world = rdv.rank, config.world_size
        self.is_main = self.rank == 0
        hp = config.hyperparameters
        if not isinstance(hp, hps.ResNet20):
            raise ConfigError(f"task {config.task} is not 1a: tensorflow runs ResNet-20 only")
        self.hp = hp
        self.batch_size = hp.batch_size
        self.momentum = hp.momentum
        self.nesterov = hp.nesterov
        self.weight_decay = hp.weight_decay
        implementation = tf.distribute.experimental.CommunicationImplementation
        comm = implementation.NCCL if config.backend == "nccl" else implementation.RING
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(implementation=comm)
        )
        if self.strategy.num_replicas_in_sync != self.world:
            raise ConfigError(
                f"TensorFlow sees {self.strategy.num_replicas_in_sync} replicas, the run plans {self.world}"
            )
        if config.precision == "bf16":
            tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
        elif config.precision != "fp32":
            raise ConfigError(
                f"precision {config.precision!r} is not implemented for tensorflow; use fp32 or bf16"
            )
        (x_train, y_train), (x_val, y_val) = load_data(config, rdv.local_rank)
        self.train_samples, self.eval_samples = len(y_train), len(y_val)  # MLPerf's sample counts
        idx = shard(len(y_train), self.rank, self.world, config.seed)
        lo, hi = len(y_val) * self.rank // self.world, len(y_val) * (self.rank + 1) // self.world
        self.train_x, self.train_y = x_train[idx], y_train[idx]
        self.val_x, self.val_y = x_val[lo:hi], y_val[lo:hi]
        self.steps_per_epoch = -(-len(self.train_y) // self.batch_size)
        with self.strategy.scope():
            tf.keras.utils.set_random_seed(config.seed)  # identical initial weights on every worker
            self.model = build_resnet20(tf.keras)
            self.variables = list(self.model.trainable_variables)
            self.buffers = [
                tf.Variable(tf.zeros(v.shape, dtype=v.dtype), trainable=False) for v in self.variables
            ]
            total = sum(int(np.prod(v.shape)) for v in self.variables)
            self.flat = tf.Variable(tf.zeros([total]), trainable=False)  # where the all-reduce lands
        self.lr = tf.Variable(0.0, trainable=False, dtype=tf.float32)
        self._compile()
        target = hp.lr
        self.schedule = Schedule(
            hp.base_lr if hp.base_lr is not None else target / self.world,
            target,
            round(hp.warmup_epochs * self.steps_per_epoch),
            hp.plateau_patience,
            hp.plateau_factor,
        )
        # the shared tracker on its CPU clock (TensorFlow's steps are synchronised by the host
        # reading their results): the same phases, sampling and train/validation times as torch's
        self.tracker = Tracker(seed=config.seed * 1009 + self.rank)

    def _compile(self) -> None:
        tf = self.tf
        model, variables, buffers, strategy = self.model, self.variables, self.buffers, self.strategy
        momentum, nesterov, wd = self.momentum, self.nesterov, self.weight_decay
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
                lr = self.lr
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

    def _batches(self, order: np.ndarray, rng: np.random.Generator) -> Iterator[tuple[Any, Any, int, bool]]:
        """An epoch's augmented batches as tensors: ``(x, y, size, last)``."""
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            x = self.tf.constant(self._augment(self.train_x[idx], rng))
            yield x, self.tf.constant(self.train_y[idx]), len(idx), start + self.batch_size >= len(order)

    def _augment(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Random 4-pixel-padded crop and horizontal flip (the PyTorch task's augmentation)."""
        n = len(x)
        padded = np.pad(x, ((0, 0), (4, 4), (4, 4), (0, 0)), mode="reflect")
        dx, dy = rng.integers(0, 9, n), rng.integers(0, 9, n)
        rows = dy[:, None] + np.arange(32)[None, :]
        cols = dx[:, None] + np.arange(32)[None, :]
        out = padded[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]
        flip = rng.random(n) < 0.5
        out[flip] = out[flip, :, ::-1]
        return out

    def global_sum(self, values: list[float]) -> list[float]:
        """Sum of ``values`` over all workers (identical result everywhere)."""
        tf = self.tf
        tensor = tf.constant(values, dtype=tf.float64)
        if self.world == 1:
            return list(values)
        # A plain tensor counts as this worker's value; MWMS reduces it across workers.
        reduced = self.strategy.reduce(tf.distribute.ReduceOp.SUM, tensor, axis=None)
        return [float(v) for v in reduced.numpy()]

    def validate(self) -> dict[str, float]:
        sums = np.zeros(3)
        for start in range(0, len(self.val_y), 500):
            x, y = self.val_x[start : start + 500], self.val_y[start : start + 500]
            sums += self.eval_step(self.tf.constant(x), self.tf.constant(y)).numpy()
        loss_sum, correct, count = self.global_sum(list(sums))
        return {
            wire.VAL_GLOBAL_LOSS: loss_sum / max(count, 1.0),
            wire.VAL_GLOBAL_PREC1: 100.0 * correct / max(count, 1.0),
        }

    def train(self) -> Outcome:
        config, reporter, tracker = self.config, self.reporter, self.tracker
        goal = config.goal
        max_epochs = self.hp.max_epochs
        report_every = self.hp.report_every_steps
        started = time.time()
        if self.is_main:
            facts = wire.RunStart(
                train_samples=self.train_samples,
                eval_samples=self.eval_samples,
                comm_precision="fp32",  # the flat fp32 buffer
            )
            wire.emit(reporter, facts)
        step = 0
        for epoch in range(1, max_epochs + 1):
            if self.is_main:
                wire.emit(reporter, wire.EpochStart(epoch=epoch))
            tracker.train()
            rng = np.random.default_rng((config.seed, self.rank, epoch))
            order = np.random.default_rng((config.seed, epoch, self.rank)).permutation(len(self.train_y))
            window_loss = window_correct = 0.0
            window_n = window_steps = 0
            window_t = time.perf_counter()
            for (x, y, n, last), record in tracker.each_batch(self._batches(order, rng)):
                self.lr.assign(self.schedule.on_step(step))
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
                step += 1
                window_loss += loss_value * n
                window_correct += float(correct)
                window_n += n
                window_steps += 1
                if record:
                    record("comp_metrics")
                if step % report_every == 0 or last:
                    now = time.perf_counter()
                    reporter.metric(wire.TRAIN_LOSS, window_loss / window_n, step=step, epoch=epoch)
                    reporter.metric(
                        wire.TRAIN_PREC1, 100.0 * window_correct / window_n, step=step, epoch=epoch
                    )
                    reporter.metric(wire.LR, self.schedule.lr, step=step, epoch=epoch)
                    reporter.metric(wire.STEP_TIME, (now - window_t) / window_steps, step=step, epoch=epoch)
                    window_loss = window_correct = 0.0
                    window_n = window_steps = 0
                    window_t = now
            if self.is_main:  # epoch_end marks the end of this validation
                wire.emit(reporter, wire.EvalStart(epoch=epoch))
            tracker.validation()
            metrics = self.validate()
            tracker.pause()
            train_s, val_s = tracker.train_time, tracker.validation_time
            for name, value in tracker.totals().items():
                reporter.metric(name, value, step=step, epoch=epoch)
            if self.is_main:
                for name, value in metrics.items():
                    reporter.metric(name, value, step=step, epoch=epoch)
                ended = wire.EpochEnd(epoch=epoch, step=step, train_time_s=train_s, val_time_s=val_s)
                wire.emit(reporter, ended)
            print(
                f"[rank {self.rank}] epoch {epoch}: "
                + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
                + f", lr={self.schedule.lr:.4g}, train {train_s:.1f}s",
                flush=True,
            )
            details = wire.Progress(epoch=epoch, step=step, train_time_s=train_s, val_time_s=val_s)
            if goal is not None and goal.reached(metrics.get(goal.metric, math.nan)):
                value = metrics[goal.metric]
                if self.is_main:
                    reached = wire.GoalReached(
                        metric=goal.metric, value=value, target=goal.target, **vars(details)
                    )
                    wire.emit(reporter, reached)
                return Outcome(
                    "success", f"goal reached: {goal.metric}={value:.4g} (target {goal.target})", details
                )
            over = config.max_time_s is not None and time.time() - started > config.max_time_s
            if self.global_sum([1.0 if over else 0.0])[0] > 0:  # every worker stops at the same epoch
                return Outcome(
                    "aborted", f"max_time_s ({config.max_time_s:g}) passed before the goal", details
                )
            self.schedule.on_validation(metrics[wire.VAL_GLOBAL_LOSS], step)
        details = wire.Progress(
            epoch=max_epochs, step=step, train_time_s=tracker.train_time, val_time_s=tracker.validation_time
        )
        if goal is None:
            return Outcome("success", f"completed {max_epochs} epochs", details)
        return Outcome("aborted", f"max_epochs ({max_epochs}) reached before the goal", details)


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
    """The TensorFlow counterpart of ``mlbench_worker.__main__.run_rank``: same events, same exits."""
    rank = rdv.rank
    if rank == 0:
        wire.emit(reporter, wire.InitStart())
    try:
        if config.task != "1a":
            raise ConfigError(f"task {config.task!r} has no tensorflow implementation (only 1a)")
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
        if rank == 0:
            wire.emit(
                reporter, wire.Environment(facts={**fingerprint(config, rdv), "host_allocator": allocator})
            )
        run = TensorFlowRun(config, rdv, reporter)
        print(
            f"[rank {rank}] training 1a (tensorflow) on {config.world_size} worker(s), "
            f"{run.steps_per_epoch} steps/epoch, batch {run.batch_size}",
            flush=True,
        )
        outcome = run.train()
        wire.emit(reporter, outcome.stop(exit_code=0))  # every rank, as in mlbench_worker.__main__
        print(f"[rank {rank}] run stopped: {outcome.status} ({outcome.reason})", flush=True)
        reporter.close(timeout=30.0)
        return 0
    except KeyboardInterrupt:
        wire.emit(reporter, wire.RunStop(status="aborted", reason=f"rank {rank} interrupted", exit_code=130))
        reporter.close(timeout=5.0)
        return 130
    except BaseException as exc:
        tb = traceback.format_exc()
        summary = f"{type(exc).__name__}: {exc}"
        code = 2 if isinstance(exc, ConfigError) else 1
        wire.emit(reporter, wire.RankFailed(rank=rank, exception=summary, traceback=tb))
        wire.emit(
            reporter, wire.RunStop(status="failed", reason=f"rank {rank} failed: {summary}", exit_code=code)
        )
        reporter.close(timeout=10.0)
        print(f"[rank {rank}] failed:\n{tb}", file=sys.stderr, end="", flush=True)
        return code
