"""The CUDA-graph step runner's logic on CPU, with ``TapeCapture`` standing in for the capture.

Graphed steps must train exactly like eager ones: static inputs refilled each step, one set of
graphs per input shape, warm-up and capture leaving no trace in the model or optimizer, state
carried between steps through the graphs' outputs, and nothing a replay would freeze (a Python
learning rate, a branch) inside the phases. ``TapeCapture`` replays a phase by re-running it and
fails when it ran other ops, other constants or other pre-existing tensors than at capture.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest
import torch
from mlbench_worker.devices.graphs import GraphedStep
from mlbench_worker.devices.replay_capture import CaptureError, ReplayCapture
from mlbench_worker.optim.centralized import CentralizedOptimizer
from mlbench_worker.tasks.awd_lstm import AWDLSTMTrainer
from mlbench_worker.tasks.logreg import LogRegTrainer
from mlbench_worker.tasks.resnet20 import ResNet20Trainer
from mlbench_worker.tasks.resnet50 import ResNet50Trainer
from mlbench_worker.tasks.steps import PhasedTrainer, StepResult
from mlbench_worker.timing.tracker import Tracker
from support.graph_tape import GraphBreak, TapeCapture
from support.trainers import single_rank_context

CIFAR = {"source": "synthetic", "options": {"train_samples": 40, "val_samples": 16}}  # batches 16, 16, 8
AWD = {
    "source": "synthetic",
    "options": {"train_tokens": 3000, "val_tokens": 200, "vocab_size": 40, "emb_size": 8}
    | {"hidden_size": 12, "num_layers": 2, "bptt": 8},
}
NO_DROPOUT = {"dropout": 0.0, "dropouth": 0.0, "dropouti": 0.0, "dropoute": 0.0, "wdrop": 0.0}


def _resnet(**hp: Any) -> ResNet20Trainer:
    warmup = {"lr": 0.04, "base_lr": 0.01, "warmup_epochs": 2.0}  # the LR changes every step
    ctx, _ = single_rank_context("1a", {"batch_size": 16, **warmup, **hp}, CIFAR, None)
    torch.manual_seed(0)
    return ResNet20Trainer(ctx)


def _awd(**hp: Any) -> AWDLSTMTrainer:
    ctx, _ = single_rank_context("3a", {"batch_size": 4, "lr": 5.0, **hp}, AWD, None)
    torch.manual_seed(0)
    return AWDLSTMTrainer(ctx)


def _batches(trainer: PhasedTrainer[Any], epochs: int) -> list[Any]:
    return [batch for epoch in range(1, epochs + 1) for batch in trainer.train_batches(epoch)]


def _train(trainer: PhasedTrainer[Any], batches: list[Any], runner: GraphedStep | None = None) -> list[float]:
    trainer.model.train()
    losses = []
    step_fn = runner.train_step if runner else trainer.train_step
    for n, batch in enumerate(batches):
        trainer.before_step(n)
        losses.append(float(step_fn(batch, None).loss))
    return losses


def _same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


def test_graphed_resnet_steps_train_exactly_like_eager_ones() -> None:
    eager, graphed = _resnet(), _resnet()
    batches = _batches(eager, 2)  # 6 steps, two of them short: two sets of graphs
    tape = TapeCapture()
    runner = GraphedStep(graphed, tape)
    assert _train(graphed, batches, runner) == _train(eager, batches)
    _same_parameters(eager.model, graphed.model)  # BatchNorm statistics included
    assert runner.captured == 2 and tape.replays == len(batches)
    assert graphed.optimizer.lr == eager.optimizer.lr  # the warm-up changed the LR every step


def _resnet50(**hp: Any) -> ResNet50Trainer:
    options = {"train_samples": 8, "val_samples": 4, "image_size": 32, "num_classes": 10}
    lars = {"opt_name": "lars", "lr": 2.0, "warmup_epochs": 2.0}  # the LR changes every step
    ctx, _ = single_rank_context(
        "1b", {"batch_size": 4, **lars, **hp}, {"source": "synthetic", "options": options}, None
    )
    torch.manual_seed(0)
    return ResNet50Trainer(ctx)


@pytest.mark.parametrize("capture", ["tape", "replay"])
def test_graphed_resnet50_lars_steps_train_like_eager_ones(capture: str) -> None:
    """Task 1b's step (LARS's trust ratios and momentum on the device, the LR a device tensor set
    between replays): recorded once, replayed, the same losses and weights as eager."""
    eager, graphed = _resnet50(), _resnet50()
    batches = _batches(eager, 2)  # 4 steps of whole batches: one set of graphs
    recorder = TapeCapture() if capture == "tape" else ReplayCapture()
    runner = GraphedStep(graphed, recorder)
    graphed_losses = _train(graphed, batches, runner)
    eager_losses = _train(eager, batches)
    if capture == "tape":  # the phases re-run: bit for bit
        assert graphed_losses == eager_losses
        _same_parameters(eager.model, graphed.model)
    else:  # the recorded ops replayed
        assert graphed_losses == pytest.approx(eager_losses, rel=1e-5)
    assert runner.captured == 1 and graphed.optimizer.lr == eager.optimizer.lr


def test_graphed_logistic_regression_matches_eager_and_refills_its_inputs() -> None:
    data = {"source": "synthetic", "options": {"train_samples": 96, "val_samples": 16, "features": 20}}
    trainers = []
    for _ in range(2):
        ctx, _ = single_rank_context("2a", {"batch_size": 32}, data, None)
        torch.manual_seed(0)
        trainers.append(LogRegTrainer(ctx))
    eager, graphed = trainers
    batches = [(x.clone(), y.clone()) for x, y in _batches(eager, 2)]
    runner = GraphedStep(graphed, TapeCapture())
    assert _train(graphed, batches, runner) == _train(eager, batches)
    _same_parameters(eager.model, graphed.model)
    assert runner.captured == 1


def test_graphed_awd_lstm_carries_the_hidden_state_through_graphs_of_every_length() -> None:
    eager, graphed = _awd(**NO_DROPOUT), _awd(**NO_DROPOUT)
    batches = _batches(eager, 1)
    lengths = {seq_len for _, _, seq_len in batches}
    assert len(lengths) > 2  # variable BPTT windows: one set of graphs per common length
    runner = GraphedStep(graphed, TapeCapture())
    assert _train(graphed, batches, runner) == pytest.approx(_train(eager, batches), rel=1e-6)
    for p, q in zip(eager.model.parameters(), graphed.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    graphed_lengths = {n for n in lengths if abs(n - graphed.bptt) <= graphed.graph_band}
    assert runner.captured == len(graphed_lengths) < len(lengths)  # the rare lengths ran eagerly
    assert runner.eager_steps == sum(abs(n - graphed.bptt) > graphed.graph_band for _, _, n in batches)


def test_dropout_and_clipping_replay_the_same_ops_every_step() -> None:
    trainer = _awd()  # dropout everywhere, gradient clipping at 0.25 in the captured update
    runner = GraphedStep(trainer, TapeCapture())
    losses = _train(trainer, _batches(trainer, 1), runner)
    assert all(loss == loss for loss in losses)  # finite, and no GraphBreak raised


def test_fp16_loss_scaling_is_restored_after_warm_up_and_replays_on_the_device() -> None:
    eager, graphed = _resnet(), _resnet()
    for trainer in (eager, graphed):
        trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    batches = _batches(eager, 1)
    runner = GraphedStep(graphed, TapeCapture())
    assert _train(graphed, batches, runner) == _train(eager, batches)
    assert graphed.scaler.get_scale() == eager.scaler.get_scale() == 2.0**11  # grew once, not in warm-up
    _same_parameters(eager.model, graphed.model)


def test_a_learning_rate_left_on_the_host_is_caught() -> None:
    """Why the optimizer's LR becomes a device tensor: a float is baked into the captured step."""
    trainer = _resnet()
    original = CentralizedOptimizer.make_capturable
    CentralizedOptimizer.make_capturable = lambda self: None  # type: ignore[method-assign]
    try:
        runner = GraphedStep(trainer, TapeCapture())
        with pytest.raises(GraphBreak, match="_fused_sgd_"):
            _train(trainer, _batches(trainer, 1), runner)
    finally:
        CentralizedOptimizer.make_capturable = original  # type: ignore[method-assign]


def test_phases_are_recorded_in_order_and_capture_is_set_aside() -> None:
    trainer = _resnet()
    tracker = Tracker(torch.device("cpu"), sample_every=1)
    start = time.perf_counter()
    tracker.train()
    runner = GraphedStep(trainer, TapeCapture(), aside=tracker.aside)
    seen: list[str] = []
    batch = next(iter(trainer.train_batches(1)))
    for _ in range(2):
        runner.train_step(batch, seen.append)
    tracker.pause()
    wall = time.perf_counter() - start
    phases = ["fwd_pass", "comp_loss", "backprop", "agg", "opt_step", "comp_metrics"]
    assert seen == phases * 2
    (graphs,) = runner._graphs.values()
    assert all(replay is not None for _, replay in graphs.replays)  # one rank: agg only gathers
    assert tracker.aside_s >= runner.capture_s > 0
    assert tracker.train_time + tracker.aside_s <= wall  # capture time is not training time


def test_the_step_is_not_captured_before_a_warm_up_step() -> None:
    """The first optimizer step creates the momentum buffers (and a fused SGD step copies the
    gradient into them): a graph captured there would repeat that first step forever."""
    trainer = _resnet()
    with pytest.raises(ValueError, match="warm-up"):
        GraphedStep(trainer, TapeCapture(), warmup_steps=0)
    trainer.optimizer.make_capturable()
    batch = next(iter(trainer.train_batches(1)))

    def gradients() -> None:
        step = trainer.begin_step(batch)
        for _, run in trainer.phases()[:4]:  # forward, loss, backward, agg
            run(step)

    gradients()
    (replay,) = TapeCapture().capture([trainer.update])  # the optimizer's first step, "captured"
    gradients()
    assert replay is not None
    with pytest.raises(GraphBreak, match="empty_like"):  # what the warm-up prevents
        replay()


def test_an_aggregator_with_host_steps_is_refused() -> None:
    trainer = _resnet(optimizer="power_sgd")
    with pytest.raises(ValueError, match="PowerSGDAggregator cannot run inside a CUDA graph"):
        GraphedStep(trainer, TapeCapture())


# -- ReplayCapture: replays that re-execute the recorded ops on the captured tensors, like a graph --
STEPS = 50


def _first(trainer: PhasedTrainer[Any], n: int = STEPS) -> list[Any]:
    batches: list[Any] = []
    epoch = 0
    while len(batches) < n:
        epoch += 1
        batches += list(trainer.train_batches(epoch))
    return batches[:n]


def _logreg() -> LogRegTrainer:
    data = {"source": "synthetic", "options": {"train_samples": 96, "val_samples": 16, "features": 20}}
    ctx, _ = single_rank_context("2a", {"batch_size": 40}, data, None)  # batches 40, 40, 16
    torch.manual_seed(0)
    return LogRegTrainer(ctx)


@pytest.mark.parametrize(
    "make", [lambda: _resnet(batch_size=4), _logreg, lambda: _awd(**NO_DROPOUT)], ids=["1a", "2a", "3a"]
)
def test_graph_replays_give_eager_losses_for_fifty_steps(make: Any) -> None:
    """Every task that accepts graphs: the same seed, eager and replayed, the same first 50 losses
    (fp32, 1e-5 relative); replays run the recorded ops, never the phases' Python."""
    eager, graphed = make(), make()
    batches = _first(eager)
    capture = ReplayCapture()
    runner = GraphedStep(graphed, capture)
    graphed_losses = _train(graphed, batches, runner)
    assert graphed_losses == pytest.approx(_train(eager, batches), rel=1e-5)
    assert runner.captured == capture.captures >= 1 and runner.steps == STEPS
    assert capture.replays >= (STEPS - runner.eager_steps - runner.captured) * 4  # phases replayed
    for p, q in zip(eager.model.parameters(), graphed.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert "set(s)" in runner.summary() and f"of {STEPS} steps ran eagerly" in runner.summary()


class _HiddenKeptInPython(AWDLSTMTrainer):
    """Carries the hidden state by a Python assignment inside the forward phase: eager honours it,
    a graph replay (which runs no Python) does not."""

    def forward(self, step: Any) -> None:
        super().forward(step)
        self.hidden = step.hidden

    def end_step(self, step: Any) -> Any:
        return StepResult(step.raw_loss.detach(), step.samples)


def test_a_hidden_state_not_carried_through_the_graphs_outputs_fails_on_cpu() -> None:
    def make() -> AWDLSTMTrainer:
        ctx, _ = single_rank_context("3a", {"batch_size": 4, "lr": 5.0, **NO_DROPOUT}, AWD, None)
        torch.manual_seed(0)
        return _HiddenKeptInPython(ctx)

    eager, graphed = make(), make()
    batches = [b for b in _first(eager, 12) if abs(b[2] - eager.bptt) <= eager.graph_band]
    replayed = _train(graphed, batches, GraphedStep(graphed, ReplayCapture()))
    assert replayed != pytest.approx(_train(eager, batches), rel=1e-5)  # TapeCapture would re-run it


def test_a_static_input_rebound_instead_of_refilled_is_replayed_stale() -> None:
    x = torch.ones(3)
    out = torch.zeros(3)
    (replay,) = ReplayCapture().capture([lambda: out.copy_(x * 2)])
    x.fill_(5.0)  # refilled in place: the replay reads it
    assert replay is not None
    replay()
    assert out.tolist() == [10.0, 10.0, 10.0]
    captured = x  # its owner keeps the captured buffer, but binds a new one
    x = torch.full((3,), 7.0)
    replay()
    assert out.tolist() == [10.0, 10.0, 10.0] and captured.tolist() == [5.0, 5.0, 5.0]


def test_a_replay_on_memory_its_owner_freed_fails_on_cpu() -> None:
    """What gpu_step's whole-step side did: its model and optimizer were reachable only from the
    capture's closures, so they were freed while the graph still updated them (on a GPU the
    replays overwrote another side's labels). The stand-in holds pre-existing tensors weakly, as
    a graph does, and refuses the replay."""

    def captured() -> Any:
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.ones(8, 4)

        def step() -> None:
            model(x).square().mean().backward()
            optimizer.step()

        step()  # warm-up: the momentum buffers exist before the capture
        (replay,) = ReplayCapture().capture([step])
        assert replay is not None
        replay()  # the owner still holds the model: fine
        return replay  # the model and optimizer go with this frame

    replay = captured()
    gc.collect()
    with pytest.raises(CaptureError, match="freed after capture"):
        replay()


class _MovesItsWeights(ResNet20Trainer):
    """Re-allocates a parameter's storage inside the forward phase (what nn.LSTM's re-flattening
    of its cuDNN weights did to AWD-LSTM's layers at each weight-dropped step)."""

    def forward(self, step: Any) -> None:
        weight = self.model.classifier.weight
        with torch.no_grad():
            weight.set_(weight.detach().clone())
        super().forward(step)


def test_a_capture_that_moves_a_parameter_is_refused() -> None:
    ctx, _ = single_rank_context("1a", {"batch_size": 16}, CIFAR, None)
    trainer = _MovesItsWeights(ctx)
    runner = GraphedStep(trainer, ReplayCapture())
    with pytest.raises(RuntimeError, match=r"moved 'classifier\.weight' to other memory"):
        runner.train_step(next(iter(trainer.train_batches(1))), None)


def test_a_host_read_inside_a_phase_is_refused_at_capture() -> None:
    loss = torch.ones(())
    with pytest.raises(CaptureError, match="_local_scalar_dense"):
        ReplayCapture().capture([lambda: float(loss * 2)])


def test_weight_drop_keeps_the_lstm_parameters_where_they_are() -> None:
    trainer = _awd()  # weight drop 0.5 on every layer
    before = {n: p.untyped_storage().data_ptr() for n, p in trainer.model.named_parameters()}
    trainer.model.train()
    trainer.train_step(next(iter(trainer.train_batches(1))), None)
    assert {n: p.untyped_storage().data_ptr() for n, p in trainer.model.named_parameters()} == before
