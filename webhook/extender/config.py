"""The ``extenders[]`` entry of kube-scheduler's ``KubeSchedulerConfiguration`` for this extender.

One source for the dev cluster (which writes it into its scheduler's configuration) and for
``manifests/scheduler/`` (a test checks that the manifest says the same). The choices:

* ``nodeCacheCapable: true`` - the scheduler sends node names only; the extender watches Nodes itself.
  This keeps requests small (5,000 names are ~100 KB; 5,000 Node objects are tens of MB).
* ``ignorable: false`` - a unit's ``max`` (how many pods may run on the virtual node) and the pod-level
  quota are guarantees. An ignorable extender that is down or slow would let pods through unchecked:
  onto the virtual node beyond its cap, or over a quota's ``max``. Not ignorable, a failed call fails that
  pod's scheduling attempt and the scheduler retries it with backoff, so pods wait instead of breaking the
  rules. The price: while the extender is unavailable no pod is scheduled, so it runs beside each
  scheduler as a static pod on loopback (``manifests/scheduler/``), restarted by the kubelet.
* ``weight: 200`` - the scheduler adds ``extender score × weight × 10`` to the plugins' total. The default
  score plugins weigh TaintToleration 3, NodeAffinity 2, PodTopologySpread 2, InterPodAffinity 2,
  DynamicResources 2, NodeResourcesFit 1, NodeResourcesBalancedAllocation 1, ImageLocality 1 and
  VolumeBinding 1: at most 15 × 100 = 1500 between two nodes. Usable units score 10, 9, ... so one step
  is worth ``weight × 10``; 200 makes it 2000, above anything the plugins can add - the preferred unit wins
  even where the plugins favour the (huge, empty) virtual node. The filter already narrows a policy pod to
  one unit, so this matters when the filter is bypassed; among nodes of one unit scores are equal and the
  plugins decide as usual.
* ``httpTimeout: 5s`` - the scheduler's default, written out; the handlers answer in milliseconds.
"""

from __future__ import annotations

from typing import Any

FILTER_VERB = "filter"
PRIORITIZE_VERB = "prioritize"
WEIGHT = 200
HTTP_TIMEOUT = "5s"


def extender_entry(url_prefix: str, *, ca_file: str | None = None) -> dict[str, Any]:
    """The ``extenders[]`` entry for an extender at ``url_prefix`` (``http://127.0.0.1:16408/extender``).

    An ``https://`` prefix turns on ``enableHTTPS``; ``ca_file`` (a path on the scheduler's machine)
    verifies the extender's certificate - without one the scheduler does not verify it.
    """
    https = url_prefix.startswith("https://")
    entry: dict[str, Any] = {
        "urlPrefix": url_prefix,
        "filterVerb": FILTER_VERB,
        "prioritizeVerb": PRIORITIZE_VERB,
        "weight": WEIGHT,
        "enableHTTPS": https,
        "httpTimeout": HTTP_TIMEOUT,
        "nodeCacheCapable": True,
        "ignorable": False,
    }
    if https and ca_file:
        entry["tlsConfig"] = {"caFile": ca_file}
    return entry
