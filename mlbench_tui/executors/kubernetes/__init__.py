"""The Kubernetes backend: a run as an Indexed Job (or a Kubeflow MPIJob) and the objects beside
it (``manifests``), its pods' states, logs and launch milestones, through the API (``client``)."""
