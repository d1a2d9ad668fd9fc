"""The controller's settings: command-line flags and the ``StrictPriority`` environment variable.

``kq serve`` calls :func:`add_controller_args` on its parser and hands the parsed namespace to
:func:`settings_from_args` (``run_controller`` does that itself).
"""

from __future__ import annotations

import argparse
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from webhook.api.names import CONTROLLER_COMPONENT, QUEUE_NAMESPACE, TREE_NAMESPACE
from webhook.core.decide import RECLAIM_TRIES_PER_QUOTA
from webhook.core.placement import parse_duration
from webhook.core.rate import DEFAULT_OVERSELL_RATE, RateError, format_rate, parse_rate
from webhook.core.startup import BackoffPolicy

STRICT_PRIORITY_ENV = "StrictPriority"
"""``StrictPriority=true`` in the controller's environment turns every queue to ``Block``."""
DEFAULT_LEASE_NAME = CONTROLLER_COMPONENT


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """Fixed at start."""

    oversell_rate: Fraction = DEFAULT_OVERSELL_RATE
    """Admit while ``used + request <= max × rate`` at every level (``--oversellrate``; 1 = strictly by quota)."""
    strict_priority: bool = False
    """Every queue runs ``Block`` (``StrictPriority=true`` in the environment)."""
    enabled: bool = True
    """Run the controller at all (``--no-controller`` turns it off)."""
    status_interval: float = 5.0
    """At most one write per Queue / ElasticQuotaTree status in this many seconds, and only on change."""
    leader_elect: bool = True
    """Take a ``coordination.k8s.io/v1`` Lease before admitting anything (``--no-leader-elect``: act at once)."""
    lease_name: str = DEFAULT_LEASE_NAME
    lease_namespace: str = QUEUE_NAMESPACE
    identity: str = ""
    """This replica's name in the Lease (default: host name plus a random suffix)."""
    lease_duration: float = 15.0
    """A Lease not renewed for this long may be taken over by another replica."""
    renew_deadline: float = 10.0
    """The leader stops acting when it could not renew for this long."""
    retry_period: float = 2.0
    """How often the Lease is renewed (leader) or tried (follower)."""
    release_on_stop: bool = True
    """Give the Lease up on a clean stop, so another replica takes over at once."""
    resync_period: float = 10.0
    """Reconcile at least this often even when nothing changed (retries failed writes)."""
    debounce: float = 0.1
    """Reconcile this long after the first change a pass serves, so bursts of changes make one pass (a change
    that came while the last pass wrote has waited already: :mod:`webhook.controller.changes`)."""
    status_debounce: float = 1.0
    """A change of status only (a released job's or its pods' progress, this replica's Queue and tree status)
    asks for a pass within this many seconds rather than at once: a burst of them makes one pass, and the
    passes leave the CPU to the writes (issue 23). A new, deleted or re-specified object asks at once."""
    queue_namespace: str = QUEUE_NAMESPACE
    tree_namespace: str = TREE_NAMESPACE
    queue_item_cap: int = 200
    """``status.queueItemDetails.active`` lists at most this many jobs (plus a count of the rest)."""
    event_interval: float = 30.0
    """A waiting job's Queued event is re-issued at most this often (and only when its reason changed)."""
    event_readback_pages: int = 20
    """A new leader reads back at most this many pages (500 each) of Queued events before sending its own."""
    discovery_interval: float = 60.0
    """How often the API is asked which job kinds (CRDs) are installed."""
    write_concurrency: int = 32
    """Admission writes in flight at once (8 left the apiserver idle between round trips: about half the
    admissions per second on the dev cluster)."""
    reclaim_tries_per_quota: int = RECLAIM_TRIES_PER_QUOTA
    """Waiting jobs of one quota tried as reclaim preemptors per pass (bounds the work of a pass)."""
    start_timeout: float = 300.0
    """A released job whose pods do not run within this many seconds is held again and backed off
    (``--start-timeout``; 0 turns the check off). See docs/start-timeout.md."""
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    """How long a job that failed to start waits before it queues again (``--backoff-base``,
    ``--backoff-max``, ``--backoff-limit``)."""
    eta_interval: float = 5.0
    """Start estimates of the waiting jobs are refreshed at most this often, off the pass (``--eta-interval``;
    0 turns them off). See docs/eta.md."""

    def __post_init__(self) -> None:
        if self.oversell_rate <= 0:
            raise ValueError(f"oversell rate must be positive, got {self.oversell_rate}")
        if not self.identity:
            object.__setattr__(self, "identity", default_identity())
        if self.renew_deadline >= self.lease_duration:
            raise ValueError("the renew deadline must be shorter than the lease duration")


def default_identity() -> str:
    """``<host name>_<8 hex digits>``: unique per process, readable in ``kubectl get lease -o yaml``."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def rate_flag(text: str) -> Fraction:
    """``--oversellrate`` value: ``2``, ``1.5`` or ``3/2``; must be positive (:func:`webhook.core.rate.parse_rate`)."""
    try:
        return parse_rate(text)
    except RateError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_seconds(text: str) -> float:
    """A duration flag: seconds (``300``) or a Go duration (``5m``, ``1h30m``); 0 allowed."""
    try:
        value = float(text)
    except ValueError:
        try:
            value = parse_duration(text.strip())
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    """A duration flag that must be more than 0 (:func:`parse_seconds`)."""
    value = parse_seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def strict_priority_from_env(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``StrictPriority`` is ``true`` (any case) in ``env`` (default: the process environment)."""
    value = (os.environ if env is None else env).get(STRICT_PRIORITY_ENV, "")
    return value.strip().lower() == "true"


def add_controller_args(parser: argparse.ArgumentParser) -> None:
    """The controller's flags, in their own group of ``parser``."""
    group = parser.add_argument_group(
        "queue controller",
        "Admits queued jobs by quota. StrictPriority=true in the environment turns every queue to Block.",
    )
    group.add_argument(
        "--oversellrate",
        type=rate_flag,
        default=DEFAULT_OVERSELL_RATE,
        metavar="RATE",
        help=("admit jobs while used + request <= max x RATE at every quota level "
              f"(default {format_rate(DEFAULT_OVERSELL_RATE)}; 1 = strictly by quota)"),
    )
    group.add_argument(
        "--start-timeout",
        type=parse_seconds,
        default=300.0,
        metavar="DURATION",
        help="hold a released job again and back it off when its pods do not run within this time "
        "(seconds or 5m, 1h; default 5m; 0 = off)",
    )
    group.add_argument(
        "--backoff-base",
        type=parse_seconds,
        default=60.0,
        metavar="DURATION",
        help="wait after a job's first failed start before it queues again; doubles with each (default 1m)",
    )
    group.add_argument(
        "--backoff-max", type=parse_seconds, default=1800.0, metavar="DURATION",
        help="the longest wait between retries of a job that fails to start (default 30m)",
    )
    group.add_argument(
        "--backoff-limit", type=_count, default=0, metavar="N",
        help="failed starts after which a job gives up (GaveUp) until it is changed or resubmitted (default 0 = "
        "never)",
    )
    group.add_argument(
        "--eta-interval", type=parse_seconds, default=5.0, metavar="DURATION",
        help="refresh the waiting jobs' start estimates (in their Queue's status) at most this often, off the "
        "admission pass (default 5s; 0 = off)",
    )
    group.add_argument(
        "--no-controller",
        action="store_true",
        help="do not run the queue controller in this process (webhook only)",
    )
    group.add_argument(
        "--status-interval",
        type=_positive_seconds,
        default=5.0,
        metavar="DURATION",
        help="write each Queue / ElasticQuotaTree status at most this often, and only on change (default 5s)",
    )
    group.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="elect one active replica with a coordination.k8s.io Lease (default: on)",
    )
    group.add_argument(
        "--lease-name", default=DEFAULT_LEASE_NAME, help=f"the Lease's name (default {DEFAULT_LEASE_NAME})"
    )
    group.add_argument(
        "--lease-namespace", default=QUEUE_NAMESPACE, help=f"the Lease's namespace (default {QUEUE_NAMESPACE})"
    )
    group.add_argument("--identity", default="", help="this replica's name in the Lease (default: host name + random)")
    group.add_argument(
        "--lease-duration", type=_positive_seconds, default=15.0, metavar="DURATION", help=argparse.SUPPRESS
    )
    group.add_argument(
        "--renew-deadline", type=_positive_seconds, default=10.0, metavar="DURATION", help=argparse.SUPPRESS
    )
    group.add_argument(
        "--retry-period", type=_positive_seconds, default=2.0, metavar="DURATION", help=argparse.SUPPRESS
    )


def settings_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> ControllerSettings:
    """:class:`ControllerSettings` from flags added by :func:`add_controller_args` (absent flags keep their
    defaults) and the environment."""
    defaults = ControllerSettings(identity="-")

    def get(name: str, default: object) -> object:
        return getattr(args, name, default)

    rate = get("oversellrate", defaults.oversell_rate)
    return ControllerSettings(
        oversell_rate=rate if isinstance(rate, Fraction) else rate_flag(str(rate)),
        strict_priority=strict_priority_from_env(env),
        enabled=not bool(get("no_controller", False)),
        status_interval=float(get("status_interval", defaults.status_interval)),  # type: ignore[arg-type]
        leader_elect=bool(get("leader_elect", defaults.leader_elect)),
        lease_name=str(get("lease_name", defaults.lease_name)),
        lease_namespace=str(get("lease_namespace", defaults.lease_namespace)),
        identity=str(get("identity", "") or ""),
        lease_duration=float(get("lease_duration", defaults.lease_duration)),  # type: ignore[arg-type]
        renew_deadline=float(get("renew_deadline", defaults.renew_deadline)),  # type: ignore[arg-type]
        retry_period=float(get("retry_period", defaults.retry_period)),  # type: ignore[arg-type]
        start_timeout=float(get("start_timeout", defaults.start_timeout)),  # type: ignore[arg-type]
        eta_interval=float(get("eta_interval", defaults.eta_interval)),  # type: ignore[arg-type]
        backoff=BackoffPolicy(
            base_delay=float(get("backoff_base", defaults.backoff.base_delay)),  # type: ignore[arg-type]
            max_delay=float(get("backoff_max", defaults.backoff.max_delay)),  # type: ignore[arg-type]
            limit=int(get("backoff_limit", defaults.backoff.limit)),  # type: ignore[call-overload]
        ),
    )
