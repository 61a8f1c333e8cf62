"""Results: time to accuracy, scores over repeats and workers, tables and exports (pure where possible)."""
