"""``kq serve``: the admission webhook service (HTTPS), fed by watch caches.

    kq serve --port 9443 --cert certs/tls.crt --key certs/tls.key [--kubeconfig PATH] \\
             [--controller-user USER]... [--metrics-port 9090]

In a cluster, ``--self-signed-secret kube-queue/kube-queue-webhook-tls --webhook-configuration kube-queue``
makes the service keep its own certificate in that Secret and its CA in the webhook configurations.

Other parts of the service join the same process and HTTPS port as *plugins*: each module named in
:data:`PLUGIN_MODULES` may define

* ``add_arguments(parser: argparse.ArgumentParser) -> None`` - its own ``kq serve`` flags;
* ``async def attach(app: web.Application, client: KubeClient, args: argparse.Namespace) -> None`` - add
  routes and ``app.cleanup_ctx`` entries (background loops) before the server starts.

The background loops run on the main event loop; the HTTPS port is answered from a thread of its own
(:func:`webhook.admission.server.start_apart`), so a plugin's route handlers run there and must not await
objects of the main loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import ssl
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from webhook.admission import server
from webhook.admission.app import make_app
from webhook.admission.configs import NAME as CONFIG_NAME
from webhook.admission.configs import SERVICE_NAME, SERVICE_NAMESPACE
from webhook.admission.joining import Patcher, Seen, TreeReader, labeller_on, tree_reader_on
from webhook.admission.sources import build_caches, cache_context
from webhook.admission.state import (
    DEFAULT_CONTROLLER_USER,
    DEFAULT_MAX_BODY_BYTES,
    Settings,
    StateStore,
    tree_from_objects,
)
from webhook.api import kinds
from webhook.api.names import CONTROLLER_COMPONENT, TREE_NAMESPACE, VISIBILITY_API_SERVICE
from webhook.api.objects import Obj
from webhook.cli.args import Subparsers, add_listen_flags, add_service_kubeconfig_flags
from webhook.cli.wiring import import_wired
from webhook.core.integrity import WORKLOAD_CONTROLLERS
from webhook.core.quota import QuotaTree
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef
from webhook.kube.frontproxy import FRONT_PROXY, read_front_proxy, trust_front_proxy
from webhook.kube.selfcert import ensure_serving_secret, inject_api_service_ca, inject_ca_bundle, service_dns_names
from webhook.kube.serving import tls_context
from webhook.kube.shared import WATCHES, SharedWatches
from webhook.kube.tasks import TaskGroup
from webhook.readmodel.commandline import command_parser

log = logging.getLogger(__name__)

PLUGIN_MODULES = ("webhook.controller.plugin", "webhook.cli.readapi")
"""Parts served by the same process; each must import (a failure stops ``kq serve``, see
:mod:`webhook.cli.wiring`). The extender is its own process (``kq extender``), not a plugin."""

CERT_CHECK_SECONDS = 30.0
"""How often certificate files are checked for replacement (a mounted Secret updates in place)."""
GIL_SWITCH_SECONDS = 0.001
"""How long a thread holding the interpreter keeps it while another waits. The webhook answers the API server
from a thread of its own while the controller's pass (the event loop's thread) and the start estimates'
refresh (another thread) run Python for up to seconds: at the default 5 ms, two handoffs would spend the
webhook's 10 ms budget."""
SELF_CERT_SECONDS = 600.0
"""How often a self-managed certificate is checked for renewal and the CA bundle re-injected."""


@dataclass(frozen=True)
class ServeOptions:
    """Everything ``kq serve`` needs; built from the flags."""

    host: str = "0.0.0.0"
    port: int = 9443
    cert: Path | None = None
    key: Path | None = None
    self_signed_secret: tuple[str, str] | None = None
    service_name: str = SERVICE_NAME
    service_namespace: str = SERVICE_NAMESPACE
    webhook_configurations: tuple[str, ...] = ()
    cert_dir: Path | None = None
    kubeconfig: str | None = None
    context: str | None = None
    metrics_port: int | None = None
    settings: Settings = field(default_factory=Settings)
    args: argparse.Namespace = field(default_factory=argparse.Namespace)
    """All parsed flags, for plugins."""


def plugins() -> list[ModuleType]:
    """The plugin modules (see the module notes); :class:`~webhook.cli.wiring.WiringError` if one fails to
    import."""
    return [import_wired(name, "plugin") for name in PLUGIN_MODULES]


def register(subparsers: Subparsers) -> None:
    parser = command_parser(
        subparsers,
        "serve",
        "Serve POST /mutate and /validate (AdmissionReview v1) over HTTPS, plus /healthz and /readyz. "
        "State comes from watches of ElasticQuotaTrees, ResourcePolicies, PriorityClasses and Namespaces.",
        [
            "kq serve --port 9443 --cert certs/tls.crt --key certs/tls.key --kubeconfig ~/.kube/config",
            "kq serve --self-signed-secret kube-queue/kube-queue-webhook-tls --webhook-configuration kube-queue",
        ],
        wrap=False,
    )
    add_listen_flags(
        parser,
        port=9443,
        port_help="HTTPS port",
        cert_help="serving certificate (PEM), e.g. certs/tls.crt",
        key_help="its private key (PEM), e.g. certs/tls.key",
    )
    parser.add_argument(
        "--self-signed-secret",
        metavar="NAMESPACE/NAME",
        help="keep a self-issued serving certificate in this Secret (instead of --cert/--key)",
    )
    parser.add_argument("--service-name", default=SERVICE_NAME, help="Service the certificate is for")
    parser.add_argument("--service-namespace", default=SERVICE_NAMESPACE, help="namespace of that Service")
    parser.add_argument(
        "--webhook-configuration",
        action="append",
        default=[],
        metavar="NAME",
        help=f"inject the CA into this Mutating/ValidatingWebhookConfiguration (repeatable; e.g. {CONFIG_NAME})",
    )
    parser.add_argument("--cert-dir", type=Path, help="where a self-issued certificate is written (default: temp)")
    add_service_kubeconfig_flags(parser)
    parser.add_argument(
        "--controller-user",
        action="append",
        default=[],
        metavar="USER",
        help=f"an identity that is never mutated and may release held jobs (repeatable; always includes "
        f"{DEFAULT_CONTROLLER_USER})",
    )
    parser.add_argument(
        "--pod-creator",
        action="append",
        default=[],
        metavar="USER",
        help="an identity (a trailing * makes it a prefix) that creates pods for workloads, such as an "
        "operator's service account: its Pods are trusted to belong to the owner they name and may set "
        "spec.nodeName (repeatable; Kubernetes' controllers, kubelets and the Kubeflow, MPI and KubeRay "
        "operators' usual namespaces are always trusted). The admission policies know only those: beside "
        "them this identity's pods still wait on this service and may not set spec.nodeName "
        "(docs/security.md)",
    )
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics over HTTP on this port")
    parser.add_argument("--tree-namespace", default=TREE_NAMESPACE, help=argparse.SUPPRESS)
    parser.add_argument(
        "--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help="refuse larger request bodies (413)"
    )
    for plugin in plugins():
        add_arguments = getattr(plugin, "add_arguments", None)
        if add_arguments is not None:
            add_arguments(parser)
    parser.set_defaults(handler=run)


def options_from_args(args: argparse.Namespace) -> ServeOptions:
    """Check the flags and build :class:`ServeOptions` (``SystemExit`` with a message when inconsistent)."""
    secret: tuple[str, str] | None = None
    if args.self_signed_secret:
        namespace, _, name = str(args.self_signed_secret).partition("/")
        if not namespace or not name:
            raise SystemExit(
                "kq serve: --self-signed-secret takes NAMESPACE/NAME, e.g. kube-queue/kube-queue-webhook-tls"
            )
        secret = (namespace, name)
    if secret is None and (args.cert is None or args.key is None):
        raise SystemExit(
            "kq serve: give --cert and --key (make them with `kq certs --out certs/`), or --self-signed-secret"
        )
    if secret is not None and (args.cert is not None or args.key is not None):
        raise SystemExit("kq serve: --self-signed-secret and --cert/--key exclude each other")
    for path in (args.cert, args.key):
        if path is not None and not path.is_file():
            raise SystemExit(f"kq serve: {path} does not exist; make it with `kq certs --out {path.parent}/`")
    settings = Settings(
        controller_users=frozenset({DEFAULT_CONTROLLER_USER, *args.controller_user}),
        pod_creators=(*WORKLOAD_CONTROLLERS, *args.pod_creator),
        tree_namespace=args.tree_namespace,
        max_body_bytes=args.max_body_bytes,
    )
    return ServeOptions(
        host=args.host,
        port=args.port,
        cert=args.cert,
        key=args.key,
        self_signed_secret=secret,
        service_name=args.service_name,
        service_namespace=args.service_namespace,
        webhook_configurations=tuple(args.webhook_configuration),
        cert_dir=args.cert_dir,
        kubeconfig=args.kubeconfig,
        context=args.context,
        metrics_port=args.metrics_port,
        settings=settings,
        args=args,
    )


def run(args: argparse.Namespace) -> int:
    """``kq serve``: serve until SIGINT/SIGTERM on uvloop when installed (see :mod:`webhook.admission.server`)."""
    options = options_from_args(args)
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    server.run(serve(options))
    return 0


async def _watch_files(context: ssl.SSLContext, cert: Path, key: Path) -> None:
    """Reload the certificate when its files change (new TLS handshakes use the new one)."""

    def stamp() -> tuple[float, float]:
        return (cert.stat().st_mtime, key.stat().st_mtime)

    seen = stamp()
    while True:
        await asyncio.sleep(CERT_CHECK_SECONDS)
        try:
            current = stamp()
            if current != seen:
                context.load_cert_chain(cert, key)
                seen = current
                log.info("component=serve event=certificate_reloaded cert=%s", cert)
        except (OSError, ssl.SSLError) as error:
            log.warning("component=serve event=certificate_reload_failed error=%r", error)


async def _self_cert(
    client: KubeClient, options: ServeOptions, cert_dir: Path, context: ssl.SSLContext | None
) -> ssl.SSLContext:
    """Ensure the Secret, write its files, inject the CA; load into ``context`` (or a new one)."""
    assert options.self_signed_secret is not None
    namespace, name = options.self_signed_secret
    certs = await ensure_serving_secret(
        client, namespace, name, service_dns_names(options.service_name, options.service_namespace)
    )
    cert, key = cert_dir / "tls.crt", cert_dir / "tls.key"
    if not cert.exists() or cert.read_bytes() != certs.cert:
        key.touch(mode=0o600)
        key.write_bytes(certs.key)
        cert.write_bytes(certs.cert)
        (cert_dir / "ca.crt").write_bytes(certs.ca_cert)
        if context is not None:
            context.load_cert_chain(cert, key)
            log.info("component=serve event=certificate_reloaded secret=%s/%s", namespace, name)
    if options.webhook_configurations:
        await inject_ca_bundle(client, options.webhook_configurations, certs.ca_cert)
        await inject_api_service_ca(client, VISIBILITY_API_SERVICE, certs.ca_cert)
    return context if context is not None else tls_context(cert, key)


async def _keep_self_cert(client: KubeClient, options: ServeOptions, cert_dir: Path, context: ssl.SSLContext) -> None:
    while True:
        await asyncio.sleep(SELF_CERT_SECONDS)
        try:
            await _self_cert(client, options, cert_dir, context)
        except Exception as error:
            log.warning("component=serve event=self_cert_failed error=%r", error)


def _namespace_patcher(client: KubeClient) -> Patcher:
    """Merge-patches one namespace with ``client`` (the labels of :mod:`webhook.admission.joining`)."""
    namespaces = ResourceRef.of(kinds.NAMESPACE)

    async def patch(namespace: str, body: Obj) -> bool:
        try:
            await client.merge_patch(namespaces, namespace, dict(body))
        except KubeApiError as error:
            if error.not_found:
                return False
            raise
        return True

    return patch


def _tree_reader(client: KubeClient, tree_namespace: str) -> TreeReader:
    """Reads the honoured tree as stored: the ElasticQuotaTrees of ``tree_namespace``, one request."""
    trees = ResourceRef.of(kinds.ELASTIC_QUOTA_TREE, tree_namespace)

    async def read() -> QuotaTree | None:
        listed = await client.list_page(trees)
        items = listed.get("items") if isinstance(listed, Mapping) else None
        return tree_from_objects(items if isinstance(items, list) else [], tree_namespace)[0]

    return read


def _label_seen(store: StateStore) -> Seen:
    """Whether ``store``'s namespace watch shows a namespace with a label set to ``true``."""

    def seen(namespace: str, label: str) -> bool:
        return store.current.namespace_labels.get(namespace, {}).get(label) == "true"

    return seen


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})


@contextlib.asynccontextmanager
async def _background(*coroutines: Awaitable[None]) -> AsyncIterator[None]:
    """Run ``coroutines`` while the server runs: one that fails is logged and stops the others, and its error
    surfaces when the server stops (:class:`webhook.kube.tasks.TaskGroup`)."""
    async with TaskGroup("serve") as group:
        for coroutine in coroutines:
            group.start(coroutine, getattr(coroutine, "__qualname__", "background"))
        yield


async def serve(options: ServeOptions, stop: asyncio.Event | None = None) -> None:
    """Run until ``stop`` is set; without ``stop``, until SIGINT or SIGTERM."""
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, stop.set)
    client = await KubeClient.connect(options.kubeconfig, options.context, user_agent=CONTROLLER_COMPONENT)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(client.close)
        tmp: str | None = None
        background: list[Awaitable[None]] = []
        if options.self_signed_secret is not None:
            if options.cert_dir is None:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="kube-queue-certs-"))
            cert_dir = options.cert_dir or Path(tmp or ".")
            cert_dir.mkdir(parents=True, exist_ok=True)
            context = await _self_cert(client, options, cert_dir, None)
            background.append(_keep_self_cert(client, options, cert_dir, context))
        else:
            assert options.cert is not None and options.key is not None
            context = tls_context(options.cert, options.key)
            background.append(_watch_files(context, options.cert, options.key))
        await stack.enter_async_context(_background(*background))
        front_proxy = await read_front_proxy(client)
        if front_proxy is not None:  # the aggregated read API (webhook.controller.visibility) trusts it alone
            trust_front_proxy(context, front_proxy)

        store = StateStore(settings=options.settings)
        watches = SharedWatches()
        caches = build_caches(client, store, options.settings.tree_namespace, watches)
        app = make_app(store, options.settings)
        app[WATCHES] = watches  # the controller reads these caches instead of watching the same kinds again
        if front_proxy is not None:
            app[FRONT_PROXY] = front_proxy
        app.cleanup_ctx.append(cache_context(caches, store))
        for plugin in plugins():
            attach = getattr(plugin, "attach", None)
            if attach is not None:
                await attach(app, client, options.args)
                log.info("component=serve event=plugin_attached plugin=%s", plugin.__name__)
        # The admission routes are answered from a thread of their own (the controller's passes would hold
        # them up on this loop); ``app`` keeps the caches and the plugins' background work here.
        loop = asyncio.get_running_loop()
        labeller = labeller_on(loop, _namespace_patcher(client), _label_seen(store))
        reader = tree_reader_on(loop, _tree_reader(client, options.settings.tree_namespace))
        runner = await server.start_apart(app, make_app(store, options.settings, labeller, reader), options.host,
                                          options.port, context)
        stack.push_async_callback(runner.cleanup)
        log.info(
            "component=serve event=listening address=https://%s:%d controller_users=%s",
            options.host,
            options.port,
            ",".join(sorted(options.settings.controller_users)),
        )
        if options.metrics_port:
            metrics_app = web.Application()
            metrics_app.router.add_get("/metrics", _metrics)
            metrics_runner = web.AppRunner(metrics_app, access_log=None)
            await metrics_runner.setup()
            stack.push_async_callback(metrics_runner.cleanup)
            await web.TCPSite(metrics_runner, options.host, options.metrics_port).start()
            log.info("component=serve event=metrics address=http://%s:%d/metrics", options.host, options.metrics_port)
        server.settle_heap()
        await stop.wait()
        log.info("component=serve event=stopping")
