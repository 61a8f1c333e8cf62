# Everyday recipes. Run them through ./dev (which bootstraps .venv) or directly with .venv active.
set shell := ["bash", "-euo", "pipefail", "-c"]

default:
    @just --list

# Create .venv and install everything for development (./dev does this for you).
setup:
    @echo "environment ready: $(python --version), mlbench $(mlbench --version)"

# Run the quick-start benchmark end to end on local processes.
quickstart:
    mlbench validate specs/quickstart.yaml
    mlbench plan specs/quickstart.yaml

# Same as quickstart: the shortest real demo.
demo: quickstart

# Lint, type-check and run the whole test suite.
test *ARGS: lint typecheck
    python -m pytest {{ARGS}}

# Tests only, skipping lint and type-check (faster while iterating).
pytest *ARGS:
    python -m pytest {{ARGS}}

lint:
    ruff check .
    ruff format --check mlbench_tui workers tests benchmarks infra

fmt:
    ruff format mlbench_tui workers tests benchmarks infra
    ruff check --fix .

typecheck:
    mypy

# Regenerate the committed JSON Schema for specs.
schema:
    mlbench schema > specs/mlbench.schema.json

# Run the side-by-side performance benchmarks (not tests).
bench NAME="":
    python -m benchmarks {{NAME}}
