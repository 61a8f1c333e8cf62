"""Pulumi ComponentResources: one per cloud (``gke.GkeCluster``, ``eks.EksCluster``)."""
