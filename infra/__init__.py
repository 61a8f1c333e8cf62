"""Pulumi programs for mlbench clusters: reusable components and thin per-cloud stacks."""
