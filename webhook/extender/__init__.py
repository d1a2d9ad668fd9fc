"""kube-scheduler extender: ResourcePolicy placement (ECS first, then the virtual node under a pod cap),
pod-level elastic quota and preemption within the quota rules (the rules in :mod:`webhook.core.podquota`,
:mod:`webhook.core.preemption`, :mod:`webhook.core.placement`, :mod:`webhook.core.unitplacement` and
:mod:`webhook.core.sampling`), behind ``POST /extender/filter``, ``POST /extender/prioritize`` and
``POST /extender/preempt``.

* :mod:`~webhook.extender.protocol` - the wire format (Go field names), orjson in and out;
* :mod:`~webhook.extender.state` - the entry points: the cache, the decisions over it, and what they record;
* :mod:`~webhook.extender.cache` - the watch-fed picture of the cluster and the placements made (no I/O);
* :mod:`~webhook.extender.units` - node -> unit maps and pods per unit, kept by the cache;
* :mod:`~webhook.extender.pods` - the pods as kept (slimmed, requests parsed once per shape);
* :mod:`~webhook.extender.decide` - the filter and prioritize decisions over a read-only view of the cache;
* :mod:`~webhook.extender.decision` - the decisions, assumed placements and mark patches (values);
* :mod:`~webhook.extender.app` - the handlers, logs and metrics;
* :mod:`~webhook.extender.http` - the small HTTP/1.1 server they answer on (one pod per call, in the
  scheduler's serial cycle: the answer must come at once);
* :mod:`~webhook.extender.sources` - the watch caches that feed the state;
* :mod:`~webhook.extender.marker` - podLabels/podAnnotations/deletion cost on bound pods;
* :mod:`~webhook.extender.nudge` - wakes pods whose ``TimeoutOrExceedMax`` wait ends;
* :mod:`~webhook.extender.waits` and :mod:`~webhook.extender.wake` - pods refused for quota, woken when room
  appears;
* :mod:`~webhook.extender.audit` - reads back placements not seen bound, forgets those that ended;
* :mod:`~webhook.extender.metrics` - the metrics of those two;
* :mod:`~webhook.extender.config` - the scheduler's ``extenders[]`` entry;
* :mod:`~webhook.extender.server` - running it all (``kq extender``).
"""
