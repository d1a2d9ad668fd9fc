"""kube-scheduler extender: ResourcePolicy placement (ECS first, then the virtual node under a pod cap) and
pod-level elastic quota, behind ``POST /extender/filter`` and ``POST /extender/prioritize``.

* :mod:`~webhook.extender.protocol` - the wire format (Go field names), orjson in and out;
* :mod:`~webhook.extender.state` - the watch-fed picture of the cluster and every decision (no I/O);
* :mod:`~webhook.extender.podquota` - pod-level quota checks (pure);
* :mod:`~webhook.extender.app` - the handlers, logs and metrics;
* :mod:`~webhook.extender.http` - the small HTTP/1.1 server they answer on (one pod per call, in the
  scheduler's serial cycle: the answer must come at once);
* :mod:`~webhook.extender.sources` - the watch caches that feed the state;
* :mod:`~webhook.extender.marker` - podLabels/podAnnotations/deletion cost on bound pods;
* :mod:`~webhook.extender.nudge` - wakes pods whose ``TimeoutOrExceedMax`` wait ends;
* :mod:`~webhook.extender.config` - the scheduler's ``extenders[]`` entry;
* :mod:`~webhook.extender.server` - running it all (``kq extender``).
"""
