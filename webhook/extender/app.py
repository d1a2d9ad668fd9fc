"""The extender's HTTP routes: ``POST /extender/filter``, ``POST /extender/prioritize`` and
``POST /extender/preempt`` (kube-scheduler's ``preemptVerb``: which of the victims its preemption picked may go,
by the quota rules of :mod:`webhook.core.preemption`).

Also ``GET /healthz`` (the process answers), ``GET /readyz`` (every watch has listed) and ``GET /metrics``
(Prometheus). Served by :mod:`webhook.extender.http`: handlers take the body and answer synchronously -
decode with orjson, decide on the in-memory state (no API call per request), encode with orjson - and leave
the filter's record (the placement assumed), the decision's ``key=value`` log line and its metrics for after
the answer is written, before the next request is read.

A filter answer that lets some node through leaves ``FailedNodes`` and ``FailedAndUnresolvableNodes`` empty.
kube-scheduler reads them only when no node is left - for the pod's "0/N nodes are available" message and for
preemption - and a pod with a node left is scored and bound instead. The full-scan profile filters every node
(``percentageOfNodesToScore: 100``), so with a policy whose unit is one pool of a 5,000-node cluster the
refusals would be thousands of entries (hundreds of KB) for the scheduler to decode on every pod. When no node
passes, every refusal is sent with its reason. The log line counts both either way.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from time import perf_counter

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest

from webhook.api.names import DEFAULT_SCHEDULER, FULL_SCAN_SCHEDULER
from webhook.api.objects import Obj, meta
from webhook.extender.decision import Decision, PreemptDecision
from webhook.extender.http import Reply, Routes, text_reply
from webhook.extender.nudge import Nudger
from webhook.extender.protocol import (
    ExtenderArgs,
    ProtocolError,
    filter_error,
    filter_reply,
    parse_args,
    parse_preemption_args,
    preemption_reply,
    priority_reply,
)
from webhook.extender.refusals import RefusalNotes
from webhook.extender.state import ExtenderState

log = logging.getLogger("webhook.extender")

PREFIX = "/extender"
"""The scheduler's ``urlPrefix`` ends with this; it appends ``/filter`` and ``/prioritize``."""
MAX_BODY_BYTES = 256 * 1024 * 1024
"""Without ``nodeCacheCapable`` the scheduler sends whole Node objects: thousands of them are large."""

REQUESTS = Counter(
    "kube_queue_extender_requests",
    "Scheduler extender requests, by verb and result (filter: passed, refused; prioritize: scored; preempt: "
    "allowed, narrowed, refused; any: error, bad_request).",
    ["verb", "result"],
)
DURATION = Histogram(
    "kube_queue_extender_request_duration_seconds",
    "Time to answer one extender request (decode, decide, encode).",
    ["verb"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)
SCHEDULER_SAMPLED = Counter(
    "kube_queue_extender_scheduler_sampled_filters",
    "Filter requests for pods of a ResourcePolicy a sample can mislead that named a moving default sample of "
    "the nodes (the pod on a sampling scheduler profile): a unit of its policy may have been missed.",
)
SAMPLED_WARNING_SECONDS = 300.0
"""At most one warning log line this often about requests that look sampled (each is counted, and its
decision line says ``scheduler_sampled=true``)."""
# The children the hot paths touch, looked up once (``labels()`` hashes its arguments on every call).
FILTER_PASSED = REQUESTS.labels("filter", "passed")
FILTER_REFUSED = REQUESTS.labels("filter", "refused")
FILTER_SECONDS = DURATION.labels("filter")
PRIORITIZE_SCORED = REQUESTS.labels("prioritize", "scored")
PRIORITIZE_SECONDS = DURATION.labels("prioritize")
PREEMPT_SECONDS = DURATION.labels("preempt")

_NEEDS_QUOTES = re.compile(r'[ "=\n]')
_NONE: dict[str, str] = {}
"""No refusals (read-only)."""


def _value(value: object) -> str:
    if type(value) is int:  # counts: never quoted
        return str(value)
    text = value if isinstance(value, str) else str(value)
    if not text or _NEEDS_QUOTES.search(text) is not None:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'
    return text


def log_line(fields: dict[str, object]) -> str:
    """``key=value`` pairs, values quoted when they hold spaces, quotes or ``=``."""
    return " ".join(f"{key}={_value(value)}" for key, value in fields.items())


def _bad_request(verb: str, error: ProtocolError) -> None:
    """Count and log a request body that is not what ``verb`` takes (the scheduler gets a 400)."""
    REQUESTS.labels(verb, "bad_request").inc()
    log.warning("component=extender verb=%s event=bad_request error=%s", verb, _value(str(error)))


def _log_decision(decision: Decision | PreemptDecision, seconds: float) -> None:
    """One line per filter or preempt decision (INFO), per prioritize decision (DEBUG); built only when it is
    written."""
    level = logging.DEBUG if isinstance(decision, Decision) and decision.verb == "prioritize" else logging.INFO
    if not log.isEnabledFor(level):
        return
    fields: dict[str, object] = {"component": "extender", **decision.log_fields()}
    fields["duration_ms"] = f"{seconds * 1000:.2f}"
    log.log(level, "%s", log_line(fields))


def scheduler_name_of(pod: Obj) -> str:
    """The pod's ``spec.schedulerName`` (the default profile's name when it names none)."""
    spec = pod.get("spec")
    name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) and name else DEFAULT_SCHEDULER


def sampled_hint(scheduler_name: str) -> str:
    """What to do when a pod of a ResourcePolicy a sample can mislead was filtered on a sample of the nodes:
    fix the full-scan profile's setting, or give the pod that profile (docs/placement.md)."""
    missed = (
        "kube-scheduler stopped filtering after its default sample of the nodes, so the nodes of a unit of the "
        "pod's ResourcePolicy may be missing: the pod may go to a later unit or wait although the unit has room"
    )
    if scheduler_name == FULL_SCAN_SCHEDULER:
        return (
            f"{missed}; set percentageOfNodesToScore: 100 on the profile {FULL_SCAN_SCHEDULER} of its "
            "KubeSchedulerConfiguration (manifests/scheduler/README.md)"
        )
    return (
        f"{missed}; the pod runs on the profile {scheduler_name}, which samples: it was created before its "
        f"ResourcePolicy (or the policy's units) or outside the webhook's namespaces, and a pod's schedulerName "
        f"cannot change - recreate it (kubectl rollout restart) to get {FULL_SCAN_SCHEDULER} (docs/placement.md)"
    )


def _json(body: bytes, status: int = 200, then: Callable[[], None] | None = None) -> Reply:
    return Reply(status, body, "application/json", then)


@dataclass(frozen=True)
class ExtenderApp:
    """The extender's handlers over ``state`` (``clock`` gives epoch seconds; ``nudger`` wakes pods whose
    ``TimeoutOrExceedMax`` wait ends)."""

    state: ExtenderState
    clock: Callable[[], float] = time.time
    nudger: Nudger | None = None
    refusals: RefusalNotes | None = None
    """Tells a pod whose preemption was refused on every node why (``PreemptionRefused``)."""
    _warned_sampled: list[float] = field(default_factory=lambda: [float("-inf")])
    """When the last ``scheduler_sampled`` warning was logged (a box: the app is frozen)."""

    def routes(self) -> Routes:
        """Path -> method -> handler, for :func:`webhook.extender.http.start_server`."""
        return {
            f"{PREFIX}/filter": {"POST": self.filter},
            f"{PREFIX}/prioritize": {"POST": self.prioritize},
            f"{PREFIX}/preempt": {"POST": self.preempt},
            "/healthz": {"GET": self.healthz},
            "/readyz": {"GET": self.readyz},
            "/metrics": {"GET": self.metrics},
        }

    def filter(self, raw: bytes) -> Reply:
        """``ExtenderArgs`` in, ``ExtenderFilterResult`` out; the placement is recorded before the answer."""
        started = perf_counter()
        try:
            args = parse_args(raw)
        except ProtocolError as error:
            _bad_request("filter", error)
            return _json(filter_error(f"kube-queue extender: {error}"), status=400)
        if not self.state.ready:
            REQUESTS.labels("filter", "error").inc()
            message = "kube-queue extender is starting: its watches have not listed yet; the pod is retried"
            log.info("component=extender verb=filter pod=%s event=not_ready", args.pod_key())
            return _json(filter_error(message))
        try:
            decision, record = self.state.decide_filter(args.pod, args.node_names, self.clock(), args.nodes)
        except Exception as error:
            REQUESTS.labels("filter", "error").inc()
            log.exception("component=extender verb=filter pod=%s event=failed", args.pod_key())
            return _json(filter_error(f"kube-queue extender failed on {args.pod_key()}: {error!r}"))
        if decision.passing:  # the scheduler reads the refusals only when no node is left (see the module notes)
            body = filter_reply(args, decision.passing, _NONE, _NONE)
        else:
            body = filter_reply(args, decision.passing, decision.failed, decision.unresolvable)
        seconds = perf_counter() - started
        return _json(body, then=lambda: self._filtered(args, decision, record, seconds))

    def _filtered(self, args: ExtenderArgs, decision: Decision, record: Callable[[], None], seconds: float) -> None:
        """After a filter answer is written: the decision's record (before any other request is read, see
        :meth:`ExtenderState.decide_filter`), the nudge timer, metrics and the log line."""
        record()
        if self.nudger is not None and decision.retry_at is not None and not decision.passing:
            metadata = meta(args.pod)
            self.nudger.schedule(
                str(metadata.get("namespace") or ""),
                str(metadata.get("name") or ""),
                str(metadata.get("uid") or ""),
                decision.retry_at,
            )
        (FILTER_PASSED if decision.passing else FILTER_REFUSED).inc()
        FILTER_SECONDS.observe(seconds)
        _log_decision(decision, seconds)
        if decision.scheduler_sampled:
            self._sampled(decision, scheduler_name_of(args.pod))

    def _sampled(self, decision: Decision, scheduler_name: str) -> None:
        """Count a request that looks cut short by the scheduler's sampling; warn now and then, with what to
        do for the pod's profile (:func:`sampled_hint`)."""
        SCHEDULER_SAMPLED.inc()
        now = self.clock()
        if now - self._warned_sampled[0] < SAMPLED_WARNING_SECONDS:
            return
        self._warned_sampled[0] = now
        log.warning(
            "component=extender event=scheduler_sampled pod=%s policy=%s scheduler=%s nodes=%d cluster_nodes=%d "
            "hint=%s",
            decision.pod,
            decision.policy,
            _value(scheduler_name),
            decision.nodes,
            len(self.state.nodes),
            _value(sampled_hint(scheduler_name)),
        )

    def prioritize(self, raw: bytes) -> Reply:
        """``ExtenderArgs`` in, ``HostPriorityList`` out (every node 0 when the extender cannot score)."""
        started = perf_counter()
        try:
            args = parse_args(raw)
        except ProtocolError as error:
            _bad_request("prioritize", error)
            return _json(b"[]", status=400)
        if not self.state.ready:
            REQUESTS.labels("prioritize", "error").inc()
            return _json(priority_reply(args.node_names, {}))
        try:
            decision = self.state.prioritize(args.pod, args.node_names, self.clock())
        except Exception:
            REQUESTS.labels("prioritize", "error").inc()
            log.exception("component=extender verb=prioritize pod=%s event=failed", args.pod_key())
            return _json(priority_reply(args.node_names, {}))
        body = priority_reply(args.node_names, decision.score_groups)
        seconds = perf_counter() - started
        return _json(body, then=lambda: self._prioritized(decision, seconds))

    @staticmethod
    def _prioritized(decision: Decision, seconds: float) -> None:
        PRIORITIZE_SCORED.inc()
        PRIORITIZE_SECONDS.observe(seconds)
        _log_decision(decision, seconds)

    def preempt(self, raw: bytes) -> Reply:
        """``ExtenderPreemptionArgs`` in, ``ExtenderPreemptionResult`` out: the nodes whose victims may go.
        An answer other than 200 fails the scheduler's preemption attempt (nobody is evicted; the pod is retried)."""
        started = perf_counter()
        try:
            args = parse_preemption_args(raw)
        except ProtocolError as error:
            _bad_request("preempt", error)
            return text_reply(400, f"kube-queue extender: {error}")
        if not self.state.ready:
            REQUESTS.labels("preempt", "error").inc()
            log.info("component=extender verb=preempt pod=%s event=not_ready", args.pod_key())
            return text_reply(503, "kube-queue extender is starting: its watches have not listed yet; retried later")
        try:
            decision = self.state.preempt(args.pod, args.victims, self.clock())
        except Exception:
            REQUESTS.labels("preempt", "error").inc()
            log.exception("component=extender verb=preempt pod=%s event=failed", args.pod_key())
            return text_reply(500, f"kube-queue extender failed on {args.pod_key()}: see its log")
        body = preemption_reply(decision.kept)
        seconds = perf_counter() - started
        return _json(body, then=lambda: self._preempted(args.pod, decision, seconds))

    def _preempted(self, pod: Obj, decision: PreemptDecision, seconds: float) -> None:
        result = "refused" if not decision.kept else "narrowed" if decision.refused else "allowed"
        REQUESTS.labels("preempt", result).inc()
        PREEMPT_SECONDS.observe(seconds)
        _log_decision(decision, seconds)
        if self.refusals is not None:
            self.refusals.preempted(pod, decision)

    def healthz(self, raw: bytes) -> Reply:
        return text_reply(200, "ok")

    def readyz(self, raw: bytes) -> Reply:
        if self.state.ready:
            return text_reply(200, "ok")
        return text_reply(503, "watches still listing")

    def metrics(self, raw: bytes) -> Reply:
        return Reply(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)


def make_app(state: ExtenderState, clock: Callable[[], float] = time.time, nudger: Nudger | None = None,
             refusals: RefusalNotes | None = None) -> ExtenderApp:
    """The extender's handlers over ``state``; serve them with ``start_server(app.routes(), ...)``."""
    return ExtenderApp(state, clock, nudger, refusals)
