"""GKE stack: ``pulumi up`` here (or ``mlbench cluster create gcp``) builds one benchmark cluster.

Configure with ``pulumi config set gcp:project my-project``, ``pulumi config set zone
us-central1-a``, ``pulumi config set nodes 2``; every key is listed in Pulumi.yaml.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's programs

from mlbench_infra.gke import program

program()
