"""EKS stack: ``pulumi up`` here (or ``mlbench cluster create aws``) builds one benchmark cluster.

Configure with ``pulumi config set aws:region us-east-1``, ``pulumi config set nodes 2``,
``pulumi config set instanceType g4dn.xlarge``; every key is listed in Pulumi.yaml. After a
direct ``pulumi up``, run ``mlbench cluster init --device-plugin`` to deploy the NVIDIA device
plugin (``mlbench cluster create aws`` does that itself).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's programs

from mlbench_infra.eks import program

program()
