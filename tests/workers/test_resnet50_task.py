"""Task 1b in one process: the model as torchvision defines it, MLPerf's update and schedule, the
hyperparameter policy, and the trainer on tiny synthetic images and on real JPEG files."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
from mlbench_worker.hyperparams import LARS_MIN_GLOBAL_BATCH, ResNet50, parse_hyperparameters
from mlbench_worker.knobs import HyperparameterError
from mlbench_worker.models.resnet50 import Bottleneck, resnet50
from mlbench_worker.optim.lars import LARS, param_groups
from mlbench_worker.optim.schedules import PolyWarmup
from mlbench_worker.tasks.resnet50 import ResNet50Trainer
from support.imagenet_files import write_layout
from support.trainers import single_rank_context

from mlbench_tui.errors import SpecError
from mlbench_tui.plan import expand
from mlbench_tui.spec.loader import load_text

TINY = {"train_samples": 32, "val_samples": 16, "image_size": 32, "num_classes": 4}


def trainer(
    hp: dict[str, Any] | None = None, data: dict[str, Any] | None = None, **kw: Any
) -> ResNet50Trainer:
    data = data or {"source": "synthetic", "options": TINY}
    ctx, _ = single_rank_context("1b", {"batch_size": 8, **(hp or {})}, data, None, **kw)
    torch.manual_seed(0)
    return ResNet50Trainer(ctx)


# ------------------------------------------------------------------------------------ the model


def test_the_model_is_torchvisions_resnet50_v1_5() -> None:
    model = resnet50()
    assert sum(p.numel() for p in model.parameters()) == 25_557_032  # torchvision's resnet50
    state = model.state_dict()
    assert len(state) == 320 and list(state)[:2] == ["conv1.weight", "bn1.weight"]
    assert "layer4.2.bn3.running_var" in state and "layer2.0.downsample.0.weight" in state
    first = model.layer2[0]
    assert isinstance(first, Bottleneck)
    assert first.conv1.stride == (1, 1) and first.conv2.stride == (2, 2)  # v1.5: the 3x3 strides
    assert first.downsample is not None and first.downsample[0].stride == (2, 2)
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, 1000)


def test_initialisation_is_torchvisions_with_zero_init_residual_on_request() -> None:
    torch.manual_seed(0)
    model = resnet50(10, zero_init_residual=True).requires_grad_(False)
    blocks = [m for m in model.modules() if isinstance(m, Bottleneck)]
    assert len(blocks) == 16 and all(float(b.bn3.weight.abs().sum()) == 0 for b in blocks)
    assert float(model.bn1.weight.min()) == 1 and float(model.layer1[0].bn1.bias.abs().max()) == 0
    fan_out = model.conv1.weight.shape[0] * 7 * 7  # Kaiming normal, fan_out, ReLU gain
    assert float(model.conv1.weight.std()) == pytest.approx((2 / fan_out) ** 0.5, rel=0.05)
    plain = resnet50(10).requires_grad_(False)
    assert all(float(b.bn3.weight.min()) == 1 for b in plain.modules() if isinstance(b, Bottleneck))


# --------------------------------------------------------------------------- update and schedule


def test_lars_is_mlperfs_update() -> None:
    """One step by hand: trust ratio eta |w| / (|g| + wd |w|) on weights, plain momentum with no
    decay on the vector group; the velocity carries the learning rate."""
    torch.manual_seed(1)
    weight = torch.randn(6, 4, requires_grad=True)
    bias = torch.randn(6, requires_grad=True)
    w0, b0 = weight.detach().clone(), bias.detach().clone()
    weight.grad, bias.grad = torch.randn(6, 4), torch.randn(6)
    g, gb = weight.grad.clone(), bias.grad.clone()
    opt = LARS(param_groups([weight, bias], decay_vectors=False), lr=2.0, momentum=0.9, weight_decay=1e-4)
    opt.step()
    trust = 1e-3 * w0.norm() / (g.norm() + 1e-4 * w0.norm())
    v = 2.0 * trust * (g + 1e-4 * w0)
    torch.testing.assert_close(weight.detach(), w0 - v)
    torch.testing.assert_close(bias.detach(), b0 - 2.0 * gb)
    opt.step()  # the same gradient again: v = 0.9 v + lr trust (g + wd w)
    w1 = w0 - v
    trust = 1e-3 * w1.norm() / (g.norm() + 1e-4 * w1.norm())
    torch.testing.assert_close(weight.detach(), w1 - (0.9 * v + 2.0 * trust * (g + 1e-4 * w1)))
    zero = torch.zeros(3, requires_grad=True)
    zero.grad = torch.ones(3)
    LARS([zero], lr=1.0, momentum=0.0).step()  # |w| = 0: the trust ratio is 1
    torch.testing.assert_close(zero.detach(), -torch.ones(3))


def test_the_schedule_warms_up_from_zero_then_decays_as_mlperfs_polynomial() -> None:
    schedule = PolyWarmup(peak_lr=10.0, end_lr=1e-4, warmup_steps=5, decay_steps=96)
    lrs = [schedule.on_step(s) for s in range(100)]
    assert lrs[:5] == pytest.approx([2.0, 4.0, 6.0, 8.0, 10.0])
    assert lrs[5] == pytest.approx(1e-4 + (10 - 1e-4) * (1 - 1 / 96) ** 2)
    # the reference's decay spans train steps - warm-up + 1: the last step is one step short of 1e-4
    assert lrs[99] == pytest.approx(1e-4 + (10 - 1e-4) / 96**2) and schedule.on_step(500) == pytest.approx(
        1e-4
    )
    assert all(a >= b for a, b in itertools.pairwise(lrs[4:]))


# ------------------------------------------------------------------------ hyperparameter policy


def test_the_recipe_follows_the_global_batch() -> None:
    sgd = ResNet50().recipe(1)  # global batch 256
    assert (sgd.opt_name, sgd.lr, sgd.warmup_epochs, sgd.max_epochs, sgd.weight_decay) == (
        "sgd",
        0.1,
        0,
        90,
        1e-4,
    )
    assert (
        ResNet50(batch_size=64).recipe(2).lr == 0.05 and ResNet50(batch_size=64).recipe(2).warmup_epochs == 0
    )
    assert ResNet50(batch_size=128).recipe(4).warmup_epochs == 5  # above 256: Goyal et al.'s warm-up
    lars = ResNet50().recipe(LARS_MIN_GLOBAL_BATCH // 256)
    assert (lars.opt_name, lars.lr, lars.warmup_epochs, lars.max_epochs, lars.weight_decay) == (
        "lars", 10.0, 5.0, 41, 2e-4
    )  # fmt: skip
    assert ResNet50().recipe(128).lr == 31.2 and ResNet50().recipe(128).warmup_epochs == 25
    mine = ResNet50(opt_name="lars", lr=7.5, warmup_epochs=2, max_epochs=30, weight_decay=5e-5).recipe(1)
    assert (mine.opt_name, mine.lr, mine.warmup_epochs, mine.max_epochs, mine.weight_decay) == (
        "lars", 7.5, 2, 30, 5e-5
    )  # fmt: skip
    settings = ResNet50().optimizer_settings(8)
    assert settings.local_update == "lars" and not settings.decay_vectors and not settings.nesterov


def _plan_of(body: str) -> Any:
    text = (
        "apiVersion: mlbench/v1\nkind: Benchmark\nmetadata: {name: r50}\nspec:\n  task: 1b\n"
        f"  backend: gloo\n{body}"
    )
    (loaded,) = load_text(text, "r50.yaml", environ={})
    return expand(loaded.spec)


def test_the_plan_records_the_recipe_and_the_spec_cannot_change_a_fixed_value() -> None:
    (plan,) = _plan_of("  workers: 8\n  data: synthetic\n")
    hp = plan.hyperparameters
    assert (hp["opt_name"], hp["lr"], hp["warmup_epochs"], hp["max_epochs"]) == ("lars", 10.0, 5.0, 41)
    with pytest.raises(SpecError) as info:
        _plan_of(
            "  workers: 1\n  data: synthetic\n  hyperparameters:\n    momentum: 0.8\n    lars_epsilon: 1e-9\n"
            "    weight_decay: 3e-4\n    label_smoothing: 0.05\n    lr: 0.0125\n"
        )
    text = info.value.render()
    assert (
        "r50.yaml:10:5: spec.hyperparameters.momentum: hyperparameter 'momentum' is fixed by task 1b" in text
    )
    assert "hyperparameter 'lars_epsilon' is fixed by task 1b" in text
    assert "'weight_decay' must be 1e-4 x 2^N (MLPerf's rule), got 0.0003" in text
    assert "'label_smoothing' must be 0 or 0.1 (MLPerf's rule), got 0.05" in text
    assert "'lr' must be a multiple of 0.001 for SGD (MLPerf's rule), got 0.0125" in text
    # what MLPerf lets change, within its rules, is accepted
    (plan,) = _plan_of(
        "  workers: 1\n  data: synthetic\n  hyperparameters: {weight_decay: 5e-5, label_smoothing: 0}\n"
    )
    assert plan.hyperparameters["weight_decay"] == 5e-5
    with pytest.raises(HyperparameterError, match=r"1e-4 x 2\^N"):  # the rank applies the same rules
        parse_hyperparameters("1b", {"weight_decay": 3e-4})


def test_data_options_are_checked_at_validation_and_by_the_rank() -> None:
    with pytest.raises(SpecError) as info:
        _plan_of(
            "  workers: 1\n  data:\n    source: synthetic\n    options: {image_sise: 32, image_size: 16}\n"
        )
    text = info.value.render()
    assert "unknown data option 'image_sise'" in text and "did you mean 'image_size'?" in text
    assert "data option 'image_size' must be >= 32, got 16" in text
    with pytest.raises(HyperparameterError, match="data option 'loader_workers' must be >= 0"):
        trainer(data={"source": "path", "path": "/nowhere", "options": {"loader_workers": -1}})


# ---------------------------------------------------------------------------------- the trainer


def test_tiny_synthetic_images_train_and_validate_in_channels_last(
    capsys: pytest.CaptureFixture[str],
) -> None:
    t = trainer({"opt_name": "lars", "lr": 2.0, "warmup_epochs": 1})
    assert "synthetic, 4 classes, 32x32" in capsys.readouterr().out
    conv = t.model.conv1.weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and t.model.fc.out_features == 4
    assert t.train_samples == 32 and t.eval_samples == 16
    losses = []
    for epoch in (1, 2, 3):
        for step, batch in enumerate(t.train_batches(epoch)):
            t.before_step((epoch - 1) * 4 + step)
            inputs = batch[0]
            assert inputs.shape == (8, 3, 32, 32) and inputs.is_contiguous(memory_format=torch.channels_last)
            losses.append(float(t.train_step(batch, None).loss))
    assert len(losses) == 12 and t.lr < 2.0  # warmed up over epoch 1, decaying since
    assert sum(losses[-4:]) < sum(losses[:4])
    metrics = t.validate()
    assert (
        set(metrics) == {"val_global_loss", "val_global_Prec@1"} and 0 <= metrics["val_global_Prec@1"] <= 100
    )


@pytest.mark.parametrize("optimizer", ["centralized_sgd", "power_sgd"])
def test_bf16_and_powersgd_steps_run_on_cpu(optimizer: str) -> None:
    t = trainer({"optimizer": optimizer, "opt_name": "lars"}, precision="bf16")
    before = t.model.fc.weight.detach().clone()
    result = t.train_step(next(iter(t.train_batches(1))), None)
    assert torch.isfinite(result.loss) and not torch.equal(before, t.model.fc.weight.detach())


def test_real_jpeg_files_train_through_the_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``path`` source on real JPEGs in the standard layout: local rank 0 indexes them, the
    loader decodes, crops to the task's size and normalises, validation covers every image."""
    monkeypatch.setenv("MLBENCH_DATA_DIR", str(tmp_path / "cache"))
    root = tmp_path / "imagenet"
    write_layout(root, train=4, val=2)
    data = {"source": "path", "path": str(root), "options": {"loader_workers": 0}}
    t = trainer({"batch_size": 4}, data=data)
    assert (t.train_samples, t.eval_samples) == (16, 8) and t.model.fc.out_features == 4
    batches = list(t.train_batches(1))
    assert len(batches) == 4 and batches[0][0].shape == (4, 3, 224, 224)
    result = t.train_step(batches[0], None)
    assert torch.isfinite(result.loss)
    assert t.validate()["val_global_Prec@1"] >= 0
    assert (root / "mlbench-index" / "meta.json").is_file()
