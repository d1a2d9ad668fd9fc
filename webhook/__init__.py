"""Elastic-quota job queueing for Kubernetes (a re-build of kube-queue)."""
