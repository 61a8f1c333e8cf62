"""Runs as the user drives them: apply specs and watch the runs, then read their status, logs and
results, cancel, delete or export them. One module per job; ``mlbench_tui.commands.run`` is the
thin CLI over them."""
