"""Worker tests run torch on one intra-op thread: on a small shared machine OpenMP's thread
team spins against other processes and makes small tensor ops 10-100x slower."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
