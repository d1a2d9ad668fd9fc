"""A local real Kubernetes control plane built from upstream Go modules (no Docker)."""
