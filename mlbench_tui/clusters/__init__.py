"""Cluster provisioning: GKE/EKS through Pulumi's Automation API, KIND locally, price estimates.

Nothing heavy is imported here: ``providers`` holds the small provider protocol and registry,
``automation`` imports pulumi lazily, and the KIND/in-cluster modules are loaded only when used.
"""
