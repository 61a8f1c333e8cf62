"""PowerSGD: numbers each rank sends per step vs a full all-reduce of every gradient.

For the models of tasks 1a (ResNet-20), 2a (logistic regression, 2000 features) and 3a (AWD-LSTM
at its reference size, WikiText-2 vocabulary) and PowerSGD ranks 1, 2 and 4, prints the bytes
per step of PowerSGD (the P and Q factors plus the uncompressed vectors) next to the plain
all-reduce and the compression ratio. It also times one aggregation (compression +
decompression, no network: a world of one) to show the compute PowerSGD adds.

    python benchmarks/powersgd.py [--ranks 1,2,4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workers"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ranks", default="1,2,4", help="comma-separated PowerSGD ranks")
    parser.add_argument("--repeats", type=int, default=5, help="timed aggregations per model and rank")
    args = parser.parse_args(argv)
    import torch
    from mlbench_worker.comm import SingleComm
    from mlbench_worker.models.awd_lstm import AWDLSTM, AWDLSTMConfig
    from mlbench_worker.models.logreg import LogisticRegression
    from mlbench_worker.models.resnet import resnet20
    from mlbench_worker.optim.powersgd import PowerSGDAggregator

    torch.set_num_threads(1)
    models = {
        "1a ResNet-20": resnet20(),
        "2a logreg (2000)": LogisticRegression(2000),
        "3a AWD-LSTM (ref.)": AWDLSTM(AWDLSTMConfig(vocab_size=33278)),
    }
    ranks = [int(r) for r in args.ranks.split(",")]
    print(
        f"{'model':<20} {'params':>10} {'full MB':>9} "
        + " ".join(f"{'r=' + str(r) + ' MB':>9} {'x':>6}" for r in ranks)
        + "   aggregation ms (r="
        + str(ranks[0])
        + ")"
    )
    for name, model in models.items():
        params = [p for p in model.parameters() if p.requires_grad]
        full = sum(p.numel() for p in params) * 4
        cells = []
        timing = 0.0
        for i, r in enumerate(ranks):
            agg = PowerSGDAggregator(SingleComm(), params, rank=r)
            sent = agg.bytes_per_step()
            cells.append(f"{sent / 1e6:9.3f} {full / sent:6.1f}")
            if i == 0:
                for p in params:
                    p.grad = torch.randn_like(p)
                samples = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    agg.aggregate()
                    samples.append(time.perf_counter() - start)
                timing = statistics.median(samples)
        print(f"{name:<20} {full // 4:>10} {full / 1e6:9.3f} " + " ".join(cells) + f"   {timing * 1e3:8.1f}")
    print("MB = bytes each rank contributes to all-reduces per step (fp32); x = full / PowerSGD.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
