"""The mlbench worker runtime: runs official tasks inside a rank and reports to the server.

It imports nothing from ``mlbench_tui``: it runs in containers that have torch but not the TUI.
"""

__version__ = "0.1.0"
