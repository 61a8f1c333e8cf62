"""mlbench's Pulumi programs, shipped in the wheel: one ComponentResource per cloud.

``gke.GkeCluster`` and ``eks.EksCluster``, each with the ``program()`` that ``mlbench cluster
create`` runs inline through the Automation API and that the thin stacks in ``infra/gcp`` and
``infra/aws`` run under the pulumi CLI. Importing a module needs the ``[infra]`` extra.
"""
