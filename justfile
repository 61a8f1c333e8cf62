# Everyday recipes. Run them through ./dev (which bootstraps .venv) or directly with .venv active.
set shell := ["bash", "-euo", "pipefail", "-c"]

default:
    @just --list

# Create .venv and install everything for development (./dev does this for you).
setup:
    @echo "environment ready: $(python --version), $(mlbench --version)"

# Run the quick-start benchmark end to end on local processes: 2 gloo ranks train ResNet-20 on
# synthetic CIFAR-10 until 70% top-1, with live progress, then print the results table.
# Applying it again does nothing (its run already succeeded); add --force to run it again.
quickstart:
    mlbench apply specs/quickstart.yaml
    @echo "next: mlbench status | mlbench logs quickstart-gloo-2w | mlbench results specs/quickstart.yaml | mlbench export quickstart-gloo-2w --out quickstart.zip" >&2

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
    lint-imports

fmt:
    ruff format mlbench_tui workers tests benchmarks infra
    ruff check --fix .

# Type-check: the engine (mlbench_tui) with mypy --strict's flags, the worker and the Pulumi
# programs with the settings in pyproject.toml.
typecheck:
    mypy
    mypy --explicit-package-bases infra

# Regenerate the committed JSON Schema for specs.
schema:
    mlbench schema > specs/mlbench.schema.json

# Regenerate the Markdown reference under docs/ (spec fields, task pages) from the schema and catalog.
docs:
    mlbench docs --out docs

# Run the side-by-side performance benchmarks (not tests).
bench NAME="":
    python -m benchmarks {{NAME}}
