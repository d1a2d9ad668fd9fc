"""Which scheduler profile a pod needs (the full node scan only where a sample of the nodes could mislead), and
whether the scheduler asks the extender about it at all.

The scheduler that calls the extender runs two profiles (:mod:`webhook.extender.config`): the default one
samples the nodes as kube-scheduler does by default, ``kube-queue-full-scan`` filters every node. The
extender is asked, on either profile, only about the nodes the scheduler filtered. On a sample:

* a pod no ResourcePolicy selects loses nothing - the extender only keeps it off the virtual node and
  refuses it everywhere when its quota is full, which any sample shows as well as every node does;
* a pod of a policy whose one unit is every regular node (``ecs`` with no ``nodeSelector``) loses nothing
  either: every regular node of the sample is in its unit;
* any other policy pod may be misled: with several units, the sample may miss the first unit's nodes and
  the pod would go to a later one (the virtual node) although the first has room; with one unit that is a
  node pool or the virtual node, the sample may miss that unit and every node of it would be refused
  although the unit has room.

So the webhook names the full-scan profile for exactly those pods (:func:`scheduler_name_for`), and only
for pods that asked for the default scheduler: a pod naming another scheduler keeps it. A pod no policy
selects that opted into ECI gets it too: the default profile keeps every pod off the virtual node.

The scheduler asks the extender only about pods carrying the marker resource
(:data:`~webhook.api.names.EXTENDER_RESOURCE`), which the webhook writes on the pods whose rules live in the
extender (:func:`calls_extender`): every pod of the tree's namespaces (the pod-level quota) and every pod a
policy selects (its units, their order and caps). The rest are placed by kube-scheduler alone; its default
profile keeps them off the virtual node (``addedAffinity``, :mod:`webhook.extender.config`), as the
extender did.
"""

from __future__ import annotations

from webhook.api.names import DEFAULT_SCHEDULER, FULL_SCAN_SCHEDULER
from webhook.core.placement_policy import ResourcePolicy, UnitResource


def needs_full_scan(policy: ResourcePolicy | None) -> bool:
    """Whether a pod under ``policy`` (``None``: no policy selects it) can be misplaced or wrongly refused
    when the scheduler filters only a sample of the nodes: several units, or one unit that is not every
    regular node (see the module notes)."""
    if policy is None:
        return False
    if len(policy.units) > 1:
        return True
    (unit,) = policy.units
    return unit.resource is UnitResource.ECI or bool(unit.node_selector)


def asks_for_default(scheduler_name: str | None) -> bool:
    """Whether ``spec.schedulerName`` leaves the pod to the default profile (absent, empty or its name)."""
    return not scheduler_name or scheduler_name == DEFAULT_SCHEDULER


def scheduler_name_for(
    scheduler_name: str | None, policy: ResourcePolicy | None, opted_in: bool = False
) -> str | None:
    """The ``spec.schedulerName`` to write on a pod (template) being created that names ``scheduler_name``
    and that ``policy`` selects (``None``: none does), or ``None`` to leave it as it is: the full-scan profile
    for a pod that asked for the default scheduler and :func:`needs_full_scan`, or that no policy selects and
    that opted into ECI (``opted_in``: the default profile never uses the virtual node); nothing otherwise -
    pods naming another scheduler, the full-scan profile included, keep it."""
    if asks_for_default(scheduler_name) and (needs_full_scan(policy) or (policy is None and opted_in)):
        return FULL_SCAN_SCHEDULER
    return None


def calls_extender(in_tree: bool, policy: ResourcePolicy | None) -> bool:
    """Whether a pod being created needs the extender's filter, so carries the marker resource: a pod of a
    namespace the tree holds (``in_tree``: the pod-level quota, docs/pod-quota.md), or one a ResourcePolicy
    selects (its units in order and their caps, docs/placement.md). A pod opted into ECI without a policy
    does not: the extender would pass it every node."""
    return in_tree or policy is not None
