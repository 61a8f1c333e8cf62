"""mlbench-tui: declarative, reproducible benchmarks for distributed machine learning."""

__version__ = "0.1.0"
