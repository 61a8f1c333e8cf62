"""AWD-LSTM model pieces: weight drop without warnings, tied weights, dropouts, AR/TAR, learning."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from mlbench_worker.models.awd_lstm import (
    AWDLSTM,
    AWDLSTMConfig,
    WeightDropLSTM,
    ar_tar_penalty,
    detach_hidden,
    embedding_dropout,
    locked_dropout,
)


def _small(**kw: float) -> AWDLSTM:
    torch.manual_seed(0)
    return AWDLSTM(AWDLSTMConfig(vocab_size=30, emb_size=8, hidden_size=12, num_layers=3, **kw))  # type: ignore[arg-type]


def test_weight_drop_masks_hidden_weights_in_training_only_and_keeps_parameters() -> None:
    torch.manual_seed(0)
    rnn = WeightDropLSTM(4, 6, weight_dropout=0.5)
    x = torch.randn(5, 2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a, _ = rnn(x)
        b, _ = rnn(x)
        a.sum().backward()
    assert not torch.allclose(a, b)
    grad = rnn.lstm.get_parameter("weight_hh_l0").grad
    assert grad is not None and 0.3 < float(grad.eq(0).float().mean()) < 0.7
    assert [n for n, _ in rnn.named_parameters()] == [
        "lstm.weight_ih_l0",
        "lstm.weight_hh_l0",
        "lstm.bias_ih_l0",
        "lstm.bias_hh_l0",
    ]
    rnn.eval()
    torch.testing.assert_close(rnn(x)[0], rnn.lstm(x)[0])


def test_tied_decoder_and_layer_sizes() -> None:
    model = _small()
    assert model.decoder.weight is model.encoder.weight
    assert model.sizes == [12, 12, 8]
    hidden = model.init_hidden(3)
    logits, new_hidden, raw, dropped = model(torch.randint(0, 30, (7, 3)), hidden)
    assert logits.shape == (21, 30) and raw.shape == dropped.shape == (7, 3, 8)
    assert [h.shape[-1] for h, _ in new_hidden] == [12, 12, 8]
    assert all(not h.requires_grad for h, _ in detach_hidden(new_hidden))


def test_embedding_dropout_equals_masking_the_whole_matrix() -> None:
    weight = torch.randn(10, 4)
    words = torch.tensor([[1, 2], [1, 9]])
    torch.manual_seed(5)
    ours = embedding_dropout(weight, words, 0.4, training=True)
    torch.manual_seed(5)
    mask = weight.new_empty(10, 1).bernoulli_(0.6) / 0.6
    torch.testing.assert_close(ours, F.embedding(words, weight * mask))
    torch.testing.assert_close(
        embedding_dropout(weight, words, 0.4, training=False), F.embedding(words, weight)
    )


def test_locked_dropout_shares_the_mask_over_time() -> None:
    torch.manual_seed(1)
    out = locked_dropout(torch.ones(6, 3, 5), 0.5, training=True)
    assert torch.equal(out[0], out[5])
    assert set(out.unique().tolist()) <= {0.0, 2.0}
    assert torch.equal(locked_dropout(torch.ones(2, 2, 2), 0.5, training=False), torch.ones(2, 2, 2))


def test_ar_tar_penalty() -> None:
    raw = torch.tensor([[[1.0]], [[3.0]]])
    dropped = torch.tensor([[[2.0]], [[0.0]]])
    # AR: 2 * mean([4, 0]) = 4; TAR: 1 * mean([(3-1)^2]) = 4.
    assert float(ar_tar_penalty(raw, dropped, 2.0, 1.0)) == 8.0
    assert float(ar_tar_penalty(raw, dropped, 0.0, 0.0)) == 0.0


def test_learns_a_repeating_sequence_with_the_reference_optimizer_settings() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = AWDLSTMConfig(
        vocab_size=30,
        emb_size=16,
        hidden_size=32,
        num_layers=2,
        dropout=0.0,
        dropouth=0.0,
        dropouti=0.0,
        dropoute=0.0,
        wdrop=0.1,
    )
    model = AWDLSTM(cfg)
    seq = torch.arange(10).repeat(4).view(-1, 1).repeat(1, 2)  # (40, 2)
    opt = torch.optim.SGD(model.parameters(), lr=30.0)  # AWD-LSTM's lr with clip 0.25
    losses = []
    for _ in range(400):
        hidden = model.init_hidden(2)
        logits, _, raw, dropped = model(seq[:-1], hidden)
        loss = F.cross_entropy(logits, seq[1:].reshape(-1))
        opt.zero_grad()
        (loss + ar_tar_penalty(raw, dropped, 0.2, 0.1)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        losses.append(float(loss.detach()))
        if losses[-1] < 0.25 * losses[0]:
            break
    # lr 30 makes the loss spike now and then after it has dropped, so a value at a fixed step is
    # luck; learning the sequence is reaching a quarter of the first loss within the steps given.
    assert losses[-1] < 0.25 * losses[0]
