"""Every label, annotation, scheduling gate, namespace and Event reason on the wire, defined once.

The system's own names share one prefix, :data:`PREFIX` (``kube-queue.x-k8s.io``); the dev cluster and the
simulator use its sub-domains ``dev.`` and ``sim.``. Names the seed defines (``kube-queue/quota-fullname``,
``kube-queue/queue-args``, ``create-by-kubequeue``, the ``quota.scheduling.alibabacloud.com`` label) keep their
seed spelling, because users and other tools read them. Names an earlier release wrote under
``kube-queue.io`` are still read (:data:`LEGACY_PREFIX`) and never written.
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "kube-queue.x-k8s.io"
"""The prefix of every label and annotation the system defines for itself."""
LEGACY_PREFIX: Final = "kube-queue.io"
"""The prefix an earlier release used for a few names; read for existing objects, never written."""
SEED_PREFIX: Final = "kube-queue"
"""The seed's own prefix (``kube-queue/quota-fullname``, ``kube-queue/queue-args``, ``kube-queue/max-jobs``)."""
DEV_PREFIX: Final = f"dev.{PREFIX}"
"""Annotations only the dev cluster's fake kubelet (kwok) reads."""
SIM_GROUP: Final = f"sim.{PREFIX}"
"""The simulator's scenario group and annotation prefix."""
LEGACY_SIM_GROUP: Final = f"sim.{LEGACY_PREFIX}"
LEGACY_DEV_PREFIX: Final = f"dev.{LEGACY_PREFIX}"

# Namespaces -------------------------------------------------------------------------------------------------
QUEUE_NAMESPACE: Final = "kube-queue"
"""Where the controller keeps the Queues (one a namespace of each leaf quota) and the system runs."""
RESERVATIONS: Final = "kube-queue-reservations"
"""The ConfigMap (in :data:`QUEUE_NAMESPACE`) where the controller says what the admitted jobs hold at each quota
node, before it releases them; the scheduler extender keeps pods no job accounts for out of that room."""
RESERVATIONS_KEY: Final = "reserved.json"
"""Its data key: ``{"<node key>": {"cpu": "40", ...}, ...}`` for every node the admitted jobs use."""
RESERVED_AT_KEY: Final = "reservedAt"
"""Its data key: when the controller last wrote it (RFC 3339); older than :data:`RESERVATIONS_TTL_SECONDS`, the
extender no longer trusts it (the controller is down) and counts the bound pods alone."""
RESERVATIONS_TTL_SECONDS: Final = 600.0
"""How long the extender trusts a reservation the controller has not written again (it writes every minute)."""
TREE_NAMESPACE: Final = "kube-system"
"""Where the ElasticQuotaTree lives (the seed's ``kubectl -n kube-system get eqtree``)."""

# Webhook paths ----------------------------------------------------------------------------------------------
MANAGED_ROUTE: Final = "managed"
"""The last path segment of the hooks whose namespace selector asks for the managed label (``/mutate/managed``,
``/validate/managed``): the API server routing a request there says the namespace is labelled, even before the
webhook's own namespace watch does."""

# The controller's read API (docs/queueing.md, "Reading every job") -----------------------------------------
VISIBILITY_GROUP: Final = f"visibility.{PREFIX}"
"""The aggregated API group ``kq serve`` answers: the jobs as the controller sees them."""
VISIBILITY_VERSION: Final = "v1alpha1"
JOB_SUMMARIES: Final = "jobsummaries"
"""Its one resource, namespaced, get and list: one item a job, ``kq list -o json``'s fields under ``job``."""
JOB_SUMMARY_KIND: Final = "JobSummary"
VISIBILITY_API_SERVICE: Final = f"{VISIBILITY_VERSION}.{VISIBILITY_GROUP}"
"""The APIService that routes the group to ``kq serve``."""
VISIBILITY_SERVICE: Final = "kube-queue-webhook"
"""The Service (in :data:`QUEUE_NAMESPACE`) the APIService names: the webhook's own, the same HTTPS port."""
TABLE_MEDIA_TYPE: Final = "application/json;as=Table;v=v1;g=meta.k8s.io"
"""What a client that wants a list as rows to print accepts (``kubectl get``; ``kq list -A``): a Kubernetes Table,
``meta.k8s.io/v1``."""

# Labels -----------------------------------------------------------------------------------------------------
QUOTA_LABEL: Final = "quota.scheduling.alibabacloud.com/name"
"""Label on jobs and their pods: the name of the leaf quota that owns them."""
MANAGED_NAMESPACE_LABEL: Final = f"{PREFIX}/managed"
"""Namespaces of the quota tree carry this label (``"true"``); the webhook configurations select on it."""
MANAGED_SINCE_ANNOTATION: Final = f"{PREFIX}/managed-since"
"""On a managed namespace: when it joined the tree (RFC 3339), written with :data:`MANAGED_NAMESPACE_LABEL`."""
PLACEMENT_SINCE_ANNOTATION: Final = f"{PREFIX}/placement-since"
"""On a namespace labelled :data:`PLACEMENT_NAMESPACE_LABEL`: when the label was set (RFC 3339), written with it.
The controller leaves a label it finds no policy for that young (its policy watch may not have the new policy
yet): ``webhook.controller.decide.PLACEMENT_GRACE_SECONDS``."""
NAMESPACE_QUOTA_LABEL: Final = f"{PREFIX}/quota"
"""On a managed namespace: the name of the leaf that lists it (:func:`webhook.core.quota.namespace_quota_label`),
kept by the controller, so the pod admission policy can tag pods with their quota without asking the service."""
PLACEMENT_NAMESPACE_LABEL: Final = f"{PREFIX}/placement"
"""Set (``"true"``) on a namespace that holds a valid ResourcePolicy, by the webhook before it stores the policy
and kept by the controller: outside the quota tree only such namespaces' Pods go to the placement webhook,
inside it only their workload controllers' pods go to the pod webhook (the virtual node's toleration, the
full-scan scheduler profile)."""
QUEUE_LABEL: Final = "create-by-kubequeue"
"""Queues the controller owns carry ``create-by-kubequeue: "true"``; only those are ever deleted."""
LAST_APPLIED_ANNOTATION: Final = "kubectl.kubernetes.io/last-applied-configuration"
"""``kubectl apply``'s copy of the whole object as the user wrote it: kept by the API server, read by no cache
of the system (the job caches drop it)."""
PERF_CLASS_LABEL: Final = f"{PREFIX}/perf-class"
"""The size class (small/medium/large) of a job in the peer-shaped simulator workload."""

# Quota attributes (ElasticQuotaTree ``attributes`` of a node) ------------------------------------------------
FAIR_SHARING_ATTRIBUTE: Final = f"{PREFIX}/fair-sharing"
"""On a parent quota, ``"true"``: its children share what they borrow beyond their ``min`` by weight
(docs/fair-sharing.md)."""
WEIGHT_ATTRIBUTE: Final = f"{PREFIX}/weight"
"""On a child of a fair-sharing parent: its weight (a positive number; default: its ``min``'s share of the
parent's, in the resource where that share is largest)."""
RECLAIM_AFTER_ATTRIBUTE: Final = f"{PREFIX}/reclaim-after"
"""On a quota: a duration (``10m``); its admitted jobs that have run for less are not taken by reclaim while
other victims free what is owed (docs/reclaim.md, "A minimum run time")."""

# Annotations ------------------------------------------------------------------------------------------------
QUOTA_RESOURCE_ANNOTATION: Final = f"{PREFIX}/quota-resource"
"""On a DeviceClass (only operators write them): the quota resource each device of the class counts as
(``nvidia.com/gpu``): a claim that asks for 2 such devices counts 2 of it (docs/accounting.md, "Devices")."""
QUOTA_FULLNAME_ANNOTATION: Final = f"{SEED_PREFIX}/quota-fullname"
"""Annotation on jobs, their pods and queues: the quota's full path (``root/Department-a``)."""
QUEUE_ARGS_ANNOTATION: Final = f"{SEED_PREFIX}/queue-args"
"""The seed's per-Queue arguments (``{}``), kept as the seed writes it."""
SUBMITTED_ANNOTATION: Final = f"{PREFIX}/submitted-at"
"""Annotation the webhook sets on a job it holds: when it was submitted, to the microsecond (RFC 3339).
``creationTimestamp`` has whole seconds only, so two jobs created in the same second would otherwise be
ordered by name, not by who came first."""
ADMISSION_ANNOTATION: Final = f"{PREFIX}/admission"
"""On an admitted job: the controller's admission record (JSON)."""
EVICTION_ANNOTATION: Final = f"{PREFIX}/evicted"
"""On a job evicted by reclaim: who reclaimed what, and when (JSON)."""
BACKOFF_ANNOTATION: Final = f"{PREFIX}/backoff"
"""On a job that failed to start in time: attempts, reason, retry time (JSON; docs/start-timeout.md)."""
WORKFLOW_SIZE_ANNOTATION: Final = f"{SEED_PREFIX}/min-resources"
"""On an Argo Workflow: the most its steps run at once, a resource list (YAML or JSON), as ACK kube-queue spells
it; without it the queue sizes the workflow from its templates (webhook/workloads/workflow.py)."""
PARENT_ANNOTATION: Final = f"{PREFIX}/queued-with"
"""``Kind/name`` of the queued job an object belongs to (a RayJob's RayCluster and submitter Job), written by the
webhook when that job's operator creates it: the object is queued with its parent, not on its own
(:mod:`webhook.workloads.children`)."""
POD_OVERHEAD_ANNOTATION: Final = f"{PREFIX}/pod-overhead"
"""On a held job whose pod templates name a RuntimeClass with an overhead: each such class's ``overhead.podFixed``
when the job was created (JSON, class name -> resource list), written by the webhook. The API server adds it to
every pod of the class, so the queue sizes the job with it (:mod:`webhook.workloads.overhead`)."""
CONTROLLER_ANNOTATIONS: Final = (ADMISSION_ANNOTATION, EVICTION_ANNOTATION, BACKOFF_ANNOTATION, PARENT_ANNOTATION,
                                 POD_OVERHEAD_ANNOTATION)
"""Annotations only kube-queue writes (users may neither set, change nor remove them)."""
STRICT_MARK_ANNOTATION: Final = f"{PREFIX}/strict-priority"
"""Set on a Queue whose ``Block`` policy the controller forced because of ``StrictPriority=true``, so it can
turn it back to ``Round`` when the variable goes away (an operator's own ``Block`` is left alone)."""
OVERSELL_RATE_ANNOTATION: Final = f"{PREFIX}/oversell-rate"
"""On the controller's Queues: the oversell rate it admits with (``2``, ``3/2``), for ``kq why``."""
LEGACY_OVERSELL_RATE_ANNOTATION: Final = f"{SEED_PREFIX}/oversell-rate"
RATE_ANNOTATIONS: Final = (OVERSELL_RATE_ANNOTATION, LEGACY_OVERSELL_RATE_ANNOTATION)
"""Where the oversell rate is read from, in order."""
QUEUED_KEY_ANNOTATION: Final = f"{PREFIX}/queued-key"
"""On a Queued Event: what it dedupes on, so a new leader does not repeat an Event already sent."""
PLACEMENT_RETRY_ANNOTATION: Final = f"{PREFIX}/placement-retry-at"
"""Written by the extender on a pod it refused for a full unit: its update puts the pod back in the
scheduler's active queue when the unit has room again (docs/placement.md)."""
SUCCEED_AFTER_ANNOTATION: Final = f"{DEV_PREFIX}/succeed-after"
"""Dev cluster only: a pod with this annotation (a duration) succeeds that long after it starts."""
FAIL_AFTER_ANNOTATION: Final = f"{DEV_PREFIX}/fail-after"
"""Dev cluster only: a pod with this annotation (a duration) fails that long after it starts."""
LEGACY_SUCCEED_AFTER_ANNOTATION: Final = f"{LEGACY_DEV_PREFIX}/succeed-after"
LEGACY_FAIL_AFTER_ANNOTATION: Final = f"{LEGACY_DEV_PREFIX}/fail-after"
EXPECTED_RUNTIME_ANNOTATION: Final = f"{PREFIX}/expected-runtime"
"""On a job, written by its submitter: how long it runs once its pods run (``45m``, ``1h30m``, ``2d`` or
seconds). Start estimates use it for the job's own run time before any history (docs/eta.md); it decides
nothing."""
FAKE_NODE_ANNOTATION: Final = "kwok.x-k8s.io/node"
"""On the dev cluster's nodes: kwok manages them (``fake``)."""

# Scheduling gates, taints, resources ------------------------------------------------------------------------
ADMISSION_GATE: Final = f"{PREFIX}/admission"
"""Scheduling gate that holds a plain Pod until the controller admits it."""
VIRTUAL_NODE_TAINT_KEY: Final = "virtual-kubelet.io/provider"
VIRTUAL_NODE_TAINT_VALUE: Final = "alibabacloud"
VIRTUAL_NODE_LABEL_KEY: Final = "type"
VIRTUAL_NODE_LABEL_VALUE: Final = "virtual-kubelet"
MAX_JOBS: Final = f"{SEED_PREFIX}/max-jobs"
"""The pseudo-resource that caps how many jobs a quota runs; each admitted job counts 1."""

# Scheduler profiles -----------------------------------------------------------------------------------------
DEFAULT_SCHEDULER: Final = "default-scheduler"
"""kube-scheduler's default profile (``spec.schedulerName`` when a pod names none): it samples the nodes."""
FULL_SCAN_SCHEDULER: Final = "kube-queue-full-scan"
"""The second profile of the scheduler that calls the extender: it filters every node
(``percentageOfNodesToScore: 100``). The webhook gives it to pods whose ResourcePolicy a sample of the nodes
could mislead (:func:`webhook.core.profiles.needs_full_scan`, docs/placement.md)."""

EXTENDER_RESOURCE: Final = f"{PREFIX}/extender"
"""The marker extended resource: the webhook writes ``1`` of it on the first container of every pod the
scheduler extender must see (pods of the tree's namespaces, pods a ResourcePolicy selects). The extender's
``managedResources`` lists it, so kube-scheduler asks the extender about those pods only, and
``ignoredByScheduler`` keeps it out of the fit check; the kubelet drops an extended resource its node does not
advertise. No quota counts it (docs/placement.md)."""
ECI_OPT_IN_LABEL: Final = "alibabacloud.com/eci"
"""A pod no ResourcePolicy selects may use the virtual node only with this label set to ``"true"``."""

# Pod labels of the job kinds (for logs and roles) -----------------------------------------------------------
ROLE_LABELS: Final = ("training.kubeflow.org/replica-type", "training.kubeflow.org/job-role", "ray.io/node-type",
                      "spark-role", "jobset.sigs.k8s.io/replicatedjob-name")
"""Where each kind's operator writes a pod's role: the training operator, the MPI Operator v2 (whose launcher, a
Job's pod, has no replica type), KubeRay, Spark, JobSet."""
INDEX_LABELS: Final = ("training.kubeflow.org/replica-index", "batch.kubernetes.io/job-completion-index",
                       "jobset.sigs.k8s.io/job-index")

# Components and Event reasons -------------------------------------------------------------------------------
CONTROLLER_COMPONENT: Final = "kube-queue-controller"
"""``reportingComponent`` of the controller's Events, its Lease name, its user on the dev cluster and the
``User-Agent`` of ``kq serve``: the field manager of what the controller writes (``spec.suspend``, its
records)."""
EXTENDER_COMPONENT: Final = "kube-queue-extender"
"""The extender's ``User-Agent``, so the field manager of the pod annotations it writes, and the
``reportingComponent`` of its Events."""
CLAIM_CONTROLLER_USER: Final = "system:serviceaccount:kube-system:resource-claim-controller"
"""Kubernetes' identity that creates a pod's ResourceClaims from the ResourceClaimTemplates it names."""
CLIENT_USER_AGENT: Final = "kube-queue"
"""The ``User-Agent`` (so the field manager of its writes) of an API client that names no component."""
REASON_ADMITTED: Final = "Admitted"
REASON_QUEUED: Final = "Queued"
REASON_EVICTED: Final = "Evicted"
REASON_HELD: Final = "Held"
REASON_RELEASED: Final = "Released"
"""The controller's Event on a held pod a job's pod created, released within that job's admission."""
REASON_BACKOFF: Final = "BackOff"
REASON_GAVE_UP: Final = "GaveUp"
REASON_PREEMPTION_REFUSED: Final = "PreemptionRefused"
"""The extender's Event on a pod whose preemption it refused on every candidate node (docs/pod-quota.md)."""

UNFINISHED_PODS: Final = "status.phase!=Succeeded,status.phase!=Failed"
"""The field selector of the pods that have not finished (the ones that count against a quota)."""

# Status fields -----------------------------------------------------------------------------------------------
HANDOFF_STATUS: Final = "handoff"
"""The honoured ElasticQuotaTree's ``status`` field that keeps the control plane's time per turn of a job, as the
controller measured it for the start estimates (docs/eta.md): ``{startSeconds: [...], endSeconds: [...]}``."""
