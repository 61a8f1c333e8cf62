"""Shared machinery of the translation tasks (4a GNMT, 4b Transformer).

``batching`` (length-bucketed sentence or token batches, rank shares, micro-batches for
gradient accumulation), ``loss`` (label-smoothed cross-entropy), ``schedules`` (GNMT's
exponential warm-up with step decay, the Transformer's inverse square root), ``beam`` (batched
beam search with GNMT's length penalty), ``bleu`` (sacrebleu statistics summed over ranks) and
``trainer`` (the ``Trainer`` both tasks share; loss scaling and reduced-precision all-reduce come
from ``mlbench_worker.optim.amp``).
"""
