"""The names of kube-queue's webhooks in the API server's configurations (``webhooks[].name``): wire names, so
each is defined once here and imported (:mod:`webhook.admission.configs` builds the configurations)."""

from __future__ import annotations

JOBS_VALIDATE = "jobs.validate.kube-queue.x-k8s.io"
"""The webhook that checks every create and update of a job of the tree's namespaces (docs/security.md)."""
NAMESPACES_MUTATE = "namespaces.mutate.kube-queue.x-k8s.io"
"""The webhook that labels a namespace managed when it is created while the tree lists it."""
PODS_RESIZE = "pods.resize.kube-queue.x-k8s.io"
"""The webhook that keeps an in-place resize within the pod's quota."""
PODS_MUTATE = "pods.mutate.kube-queue.x-k8s.io"
"""The webhook that holds bare Pods and marks every pod of the tree's namespaces for the extender (with the
admission policies: every pod but a workload controller's)."""
PODS_MUTATE_WORKLOADS = "pods.workloads.mutate.kube-queue.x-k8s.io"
"""With the admission policies: the pod webhook of the pods workload controllers create in a namespace with a
ResourcePolicy, which fails open."""
PODS_MUTATE_WORKLOADS_OPT_IN = "pods.workloads.eci-opt-in.kube-queue.x-k8s.io"
"""With the admission policies: the same for the pods that opted into ECI in the other managed namespaces."""
PODS_VALIDATE = "pods.validate.kube-queue.x-k8s.io"
"""Without the admission policies: the webhook that checks users' updates of the tree's pods."""
TEMPLATES_VALIDATE = "templates.validate.kube-queue.x-k8s.io"
"""Without the admission policies: the webhook that keeps ``nodeName`` out of the pod templates users write
(the templates guard policy's rule, :mod:`webhook.core.pod_templates`)."""
CLAIMS_VALIDATE = "claims.validate.kube-queue.x-k8s.io"
"""The webhook that refuses DRA claims (and templates) of the tree's namespaces the quota cannot count."""
CLAIMS_FROM_TEMPLATES = "claims.templated.validate.kube-queue.x-k8s.io"
"""Beside the admission policies: the claims webhook for the claims Kubernetes makes from a pod's templates,
which fails open. Their template was checked at its creation, and the extender keeps a pod whose claim it
cannot count waiting (docs/pod-quota.md), so an admitted job's DRA pods do not wait on the service."""
JOBS_SCALE = "jobs.scale.kube-queue.x-k8s.io"
"""The webhook that keeps a job's scale subresource (``kubectl scale``, a HorizontalPodAutoscaler) from changing
the size the queue counted it at, in the tree's namespaces."""
