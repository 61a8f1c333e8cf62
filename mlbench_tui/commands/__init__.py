"""CLI command groups. Each module imports only argparse at import time and exposes ``register``."""
