"""Flat gradient buffers: one per dtype and device, views in each parameter's own layout."""

from __future__ import annotations

import torch
from mlbench_worker.comm import SingleComm
from mlbench_worker.optim.aggregation import ByModelAllReduce
from mlbench_worker.optim.amp import ReducedPrecisionAllReduce
from mlbench_worker.optim.flat import FlatGradients


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return torch.nn.Sequential(conv, torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))


def test_views_keep_each_parameters_layout_and_order() -> None:
    model = _model()
    params = list(model.parameters())
    forward, backward = FlatGradients(params), FlatGradients(_model().parameters(), reverse=True)
    assert [p.shape for p, *_ in forward.spans] == [p.shape for p in params]
    assert [p.shape for p, *_ in backward.spans] == [p.shape for p in reversed(params)]
    assert backward.spans[0][2] == 0  # the last layer's gradient comes first (backward's order)
    weight = params[0]
    assert weight.grad is not None and weight.grad.stride() == weight.stride()  # channels_last
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    model(x).sum().backward()
    assert forward.bound()  # bound at first: backward accumulated into the views
    forward.zero_()
    assert weight.grad is None  # cleared: the next backward hands over fresh gradients
    model(x).sum().backward()
    fresh = weight.grad.clone()
    forward.gather()
    assert forward.bound() and weight.grad.data_ptr() == forward.flats[0].data_ptr()
    assert weight.grad.stride() == weight.stride() and torch.equal(weight.grad, fresh)


def test_accumulating_views_stay_bound_through_backward() -> None:
    model = _model()
    flat = FlatGradients(model.parameters(), accumulate=True)
    x = torch.randn(2, 3, 8, 8)
    for _ in range(2):
        flat.zero_()
        model(x).sum().backward()
        assert flat.bound()  # hooks may read the buffers while backward runs
    assert float(flat.flats[0].abs().sum()) > 0


def test_clipping_the_flat_buffer_is_torchs_clip_grad_norm() -> None:
    model, reference = _model(), _model()
    flat = FlatGradients(model.parameters())
    x = torch.randn(2, 3, 8, 8)
    for m in (model, reference):
        (m(x) * 100).sum().backward()
    norm = flat.clip_norm_(0.5)
    want = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
    torch.testing.assert_close(norm, want)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)


def test_both_by_model_aggregators_keep_gradients_in_the_shared_helper() -> None:
    for aggregator in (
        ByModelAllReduce(SingleComm(), list(_model().parameters())),
        ReducedPrecisionAllReduce(SingleComm(), list(_model().parameters()), dtype=torch.bfloat16),
    ):
        assert isinstance(aggregator.flat, FlatGradients)
        aggregator.params[0].grad = torch.ones_like(aggregator.params[0])  # replaced by someone else
        aggregator.aggregate()
        assert aggregator.flat.bound() and float(aggregator.flat.flats[0].sum()) > 0
        assert aggregator.does_work  # even on one rank: it gathers the gradients
        aggregator.zero_grad()
        assert all(p.grad is None for p in aggregator.params)
