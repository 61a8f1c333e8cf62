"""The network dimension on this machine: emulated nodes (network namespaces), their veth links
through a bridge, and tc shaping on each link.

``layout`` plans a run's names, addresses and commands (pure); ``links`` applies and removes them
with ``ip``/``tc`` and checks the shaping held; ``ledger`` records every network before it exists,
hands out subnets and removes what killed runs left; ``probe`` says what this machine can emulate;
``runs`` ties them to a run plan for the local executor.
"""

LEDGER_DIR = ".network"
"""Under the runs directory: one record per run's network (``ledger``); none, nothing to clean."""
