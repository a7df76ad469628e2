"""Kubernetes' JobSet (jobset.x-k8s.io)."""
