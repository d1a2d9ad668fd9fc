"""The ``extenders[]`` entry of kube-scheduler's ``KubeSchedulerConfiguration`` for this extender.

One source for the dev cluster (which writes it into its scheduler's configuration) and for
``manifests/scheduler/`` (a test checks that the manifest says the same). The choices:

* ``filterVerb`` only, no ``prioritizeVerb`` - the filter already decides everything the extender is for:
  it passes a ResourcePolicy pod only the nodes of the one unit it may use (every other node is refused),
  keeps pods no policy selects off the virtual node, and refuses every node to a pod over its quota. So the
  nodes the scheduler scores for a pod all lie in one unit, where the extender's scores would all be equal:
  adding the same number to every node changes no ranking, and the default plugins pick among them either
  way. The scheduler calls a prioritize verb in every scheduling cycle, though - a second HTTP round trip
  that marshals the pod and the node names again: on 500 kwok nodes (default sampling) the extender took
  41 % of the scheduler's throughput with it and 30 % without (``bench/extender_bench.py`` measures both).
  ``POST /extender/prioritize`` still answers (units in order score 10, 9, ...) for schedulers configured
  to call it: ``prioritize=True``.
* ``preemptVerb: preempt`` - kube-scheduler's preemption (DefaultPreemption) picks victims by priority and
  node fit alone; before it evicts any it asks the extender, which keeps only the nodes whose victims the
  quota rules let go (:mod:`webhook.core.preemption`: never a pod of a quota at or under its ``min`` in what
  is contended, never one of the preemptor's own quota unless its ``preempt-policy`` allows it, and only
  when the preemptor then fits ``max``), nor on a node the preemptor's ResourcePolicy would still refuse it
  (:func:`webhook.core.unitplacement.preemption_refusal`). It is called only when a pod with the marker would
  preempt (rare, and already the slow path), so it costs the common path nothing. The alternative -
  profiles whose pods never preempt, leaving preemption to the queue - would take the node-level choice of
  victims (which pods on which node make room) away from the only component that can make it, and would
  also stop the preemption a quota allows (``PreemptLowerPriority``); see manifests/scheduler/README.md.
* ``nodeCacheCapable: true`` - the scheduler sends node names only; the extender watches Nodes itself.
  Preemption then names victims by pod UID (``NodeNameToMetaVictims``), looked up in the extender's pod cache.
  This keeps requests small (5,000 names are ~100 KB; 5,000 Node objects are tens of MB).
* ``ignorable: false`` - a unit's ``max`` (how many pods may run on the virtual node) and the pod-level
  quota are guarantees. An ignorable extender that is down or slow would let pods through unchecked:
  onto the virtual node beyond its cap, or over a quota's ``max``. Not ignorable, a failed call fails that
  pod's scheduling attempt and the scheduler retries it with backoff, so pods wait instead of breaking the
  rules. The price: while the extender is unavailable no pod is scheduled, so it runs beside each
  scheduler as a static pod on loopback (``manifests/scheduler/``), restarted by the kubelet. It also means
  the filter is never skipped, which is what makes the scores redundant.
* ``weight: 200`` (with ``prioritize=True`` only) - the scheduler adds ``extender score × weight × 10`` to the
  plugins' total. The default score plugins weigh TaintToleration 3, NodeAffinity 2, PodTopologySpread 2,
  InterPodAffinity 2, DynamicResources 2, NodeResourcesFit 1, NodeResourcesBalancedAllocation 1,
  ImageLocality 1 and VolumeBinding 1: at most 15 × 100 = 1500 between two nodes. Usable units score 10,
  9, ... so one step is worth ``weight × 10``; 200 makes it 2000, above anything the plugins can add.
* ``httpTimeout: 5s`` - the scheduler's default, written out; the handlers answer in milliseconds.
* ``managedResources`` - the marker resource (:data:`~webhook.api.names.EXTENDER_RESOURCE`,
  ``ignoredByScheduler: true``): the scheduler asks the extender only about pods that request it, and the
  webhook writes it on exactly the pods whose rules the extender holds (pods of the tree's namespaces, pods a
  policy selects: :func:`webhook.core.profiles.calls_extender`). Every other pod of the cluster is scheduled
  without the round trip (issue 21: it cost a pod no policy selects 17-27 % of the scheduler's throughput,
  whoever answered) and does not wait for the extender while it is down.

And the scheduler's profiles, :data:`SCHEDULER_PROFILES` (:data:`SCHEDULER_SETTINGS` holds them as top-level
fields). By default a scheduler with more than 100 nodes stops filtering once it has found "enough" feasible
nodes (``max(100, N × (50 - N/125) %)``: 230 of 500, 420 of 1,000), starting each cycle where the last one
stopped, and an extender is only asked about those. A ResourcePolicy's first unit is usually a node pool, a
small part of a large cluster: in a sample without it the extender would see only the virtual node and send
the pod there although its pool has room - the rule "later units only when earlier ones lack resources"
broken for about half the pods (``tests/e2e/test_extender_placement.py`` shows it on 250 extra nodes). So
there are two profiles, both calling this extender for the pods that carry the marker (extenders are
scheduler-wide):

* ``default-scheduler`` samples as kube-scheduler does by default: pods no policy selects, and pods of a
  policy no sample can mislead, cost the scheduler no more nodes than without the extender. It never uses
  the virtual node (``addedAffinity`` of its NodeAffinity plugin: not ``type: virtual-kubelet``), which keeps
  the pods the extender no longer sees off it, as the extender did (a pod tolerating every taint included);
* ``kube-queue-full-scan`` (:data:`~webhook.api.names.FULL_SCAN_SCHEDULER`) filters every node
  (``percentageOfNodesToScore: 100``); the admission webhook names it on the pods that need it
  (:func:`webhook.core.profiles.needs_full_scan`, docs/placement.md).

Filtering every node is cheap; scoring every node is not, so the extender passes back at most as many of the
chosen unit's nodes as the scheduler would have scored by default (``ExtenderState.filter``).
``bench/extender_bench.py`` measures the full scan apart (``none, full scan``) and a mix of the two profiles.
"""

from __future__ import annotations

from webhook.api.names import (
    DEFAULT_SCHEDULER,
    EXTENDER_RESOURCE,
    FULL_SCAN_SCHEDULER,
    VIRTUAL_NODE_LABEL_KEY,
    VIRTUAL_NODE_LABEL_VALUE,
)
from webhook.api.objects import Doc

FILTER_VERB = "filter"
PRIORITIZE_VERB = "prioritize"
PREEMPT_VERB = "preempt"
WEIGHT = 200
"""The ``weight`` written with ``prioritize=True``: one unit step (10 × 200) outweighs every default plugin."""
HTTP_TIMEOUT = "5s"
FULL_SCAN_PERCENTAGE = 100
"""The full-scan profile's ``percentageOfNodesToScore``: every node is filtered, so the extender sees each unit
that has a feasible node."""


NOT_VIRTUAL = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": VIRTUAL_NODE_LABEL_KEY, "operator": "NotIn", "values": [VIRTUAL_NODE_LABEL_VALUE]}
            ]}
        ]
    }
}
"""The default profile's ``addedAffinity``: every node but the virtual ones (a node without the label too)."""


def scheduler_profiles(full_scan_percentage: int = FULL_SCAN_PERCENTAGE) -> list[Doc]:
    """The ``profiles[]`` of a scheduler calling this extender (see the module notes): the default profile,
    sampling as kube-scheduler does by default and never using the virtual node, and the full-scan profile."""
    return [
        {
            "schedulerName": DEFAULT_SCHEDULER,
            "pluginConfig": [{"name": "NodeAffinity", "args": {"addedAffinity": NOT_VIRTUAL}}],
        },
        {"schedulerName": FULL_SCAN_SCHEDULER, "percentageOfNodesToScore": full_scan_percentage},
    ]


SCHEDULER_PROFILES: list[Doc] = scheduler_profiles()
SCHEDULER_SETTINGS: Doc = {"profiles": SCHEDULER_PROFILES}
"""Top-level ``KubeSchedulerConfiguration`` fields a scheduler calling this extender needs: its profiles."""


def extender_entry(url_prefix: str, *, ca_file: str | None = None, prioritize: bool = False) -> Doc:
    """The ``extenders[]`` entry for an extender at ``url_prefix`` (``http://127.0.0.1:16408/extender``).

    An ``https://`` prefix turns on ``enableHTTPS``; ``ca_file`` (a path on the scheduler's machine)
    verifies the extender's certificate - without one the scheduler does not verify it. ``prioritize``
    adds ``prioritizeVerb`` and ``weight``: the scores change no placement (see the module notes), so the
    default leaves them out and saves the scheduler a round trip per pod.
    """
    https = url_prefix.startswith("https://")
    entry: Doc = {"urlPrefix": url_prefix, "filterVerb": FILTER_VERB, "preemptVerb": PREEMPT_VERB}
    if prioritize:
        entry.update(prioritizeVerb=PRIORITIZE_VERB, weight=WEIGHT)
    entry.update(enableHTTPS=https, httpTimeout=HTTP_TIMEOUT, nodeCacheCapable=True, ignorable=False,
                 managedResources=[{"name": EXTENDER_RESOURCE, "ignoredByScheduler": True}])
    if https and ca_file:
        entry["tlsConfig"] = {"caFile": ca_file}
    return entry
