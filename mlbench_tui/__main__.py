"""`python -m mlbench_tui` runs the CLI."""

from mlbench_tui.cli import main

raise SystemExit(main())
