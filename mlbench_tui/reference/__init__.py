"""The reference a user reads: the spec's fields and the official tasks, as Markdown.

Generated from what the code declares (the spec's JSON Schema, the task catalog and the
hyperparameters' knobs, MLBench's published baselines), never written by hand: ``mlbench docs``
writes ``docs/``, a test keeps the committed copy in sync, and ``mlbench explain FIELD`` and
``mlbench tasks TASK`` print the same sections in the terminal.
"""
