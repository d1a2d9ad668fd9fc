"""kube-scheduler extender handlers: filter and prioritize."""
