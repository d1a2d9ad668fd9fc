"""The job operators of the dev cluster, genuine and out of cluster.

``build-binaries.sh operators`` builds each from its Go module and copies, from the same module download, its
CRDs (``crds/``), its own RBAC manifests (``rbac/``) and, for the training operator, its webhook configuration
(``webhooks/``). The dev cluster installs those CRDs, gives each operator the identity its manifests describe
(its namespace, its ServiceAccount bound to its own ClusterRole, a token from the TokenRequest API in a
kubeconfig of its own) and runs it on loopback. Nothing is bound to cluster-admin: a right the operator's own
manifests do not grant fails here as it would in a cluster.

* training operator (``kubeflow``/``training-operator``): TFJob, PyTorchJob, MPIJob (``kubeflow.org/v1``),
  XGBoostJob, PaddleJob (MXJob is neither installed nor enabled: the queue has no adapter for it). Its webhook
  listens on the port :attr:`~webhook.devcluster.config.Ports.training_operator_webhook` of every interface
  (v1.8.1 has no flag for the address); its configuration is the operator's own, pointed at 127.0.0.1, with
  the certificate of :mod:`webhook.devcluster.operator_certs`.
* KubeRay (``kuberay-system``/``kuberay-operator``): RayJob, RayCluster, RayService.
* JobSet's controller (``jobset-system``/``jobset-controller-manager``): JobSet, with its own webhooks
  (:mod:`webhook.devcluster.jobset_operator`).
* Argo Workflows' workflow-controller (``argo``/``argo``), v4.0.5, for which security flaws are reported: it
  runs on the loopback dev cluster only and is never shipped. It takes fixed ports of every interface, so it
  runs in a network namespace of its own (:mod:`webhook.devcluster.netns`); ``TASK_RESULT_TIMEOUT_DURATION``
  is short because on fake nodes no executor ever reports a step's outputs.
* The MPI Operator v2 (``mpi-operator``/``mpi-operator``, its standalone install): MPIJob ``kubeflow.org/v2beta1``.
  Its health check takes the fixed port 8080 of every interface, so it runs in a network namespace of its own
  too. Both it and the training operator define ``mpijobs.kubeflow.org``, which one cluster holds once: where
  both run, the MPI Operator has MPIJob and the training operator runs without its ``mpijob`` scheme, its CRD
  and its MPIJob webhook, as Kubeflow's documentation has it for the two side by side.

How their jobs finish on fake nodes, whose pods run no program, is in docs/job-kinds.md.
"""

from __future__ import annotations

import base64
import functools
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from webhook.api.objects import Doc, Obj, mapping, mappings, meta
from webhook.devcluster import jobset_operator, netns, processes
from webhook.devcluster.cluster import DevClusterError
from webhook.devcluster.config import ClusterConfig
from webhook.devcluster.kubeconfig import write_token_kubeconfig
from webhook.devcluster.operator_certs import ensure_serving_files

BUILD_SCRIPT = Path(__file__).resolve().parent / "build-binaries.sh"
SPARK_CRD = Path(__file__).resolve().parent / "sparkapplications-crd.yaml"
"""SparkApplication's CRD, written from the Spark operator's published API: no Spark operator is to be had here,
so a cluster with operators gets the kind (held, sized, admitted; no pods) and nothing runs it."""
TOKEN_LIFETIME = "8760h"

Kubectl = Callable[..., str]
"""``kubectl(*args, stdin=None)`` as the dev cluster's admin."""


@dataclass(frozen=True, slots=True)
class Operator:
    """One job operator as the dev cluster runs it."""

    name: str
    """Its name in ``build-binaries.sh`` and in the state directory."""
    namespace: str
    """Where its identity lives (the namespace its manifests install it into)."""
    crds: tuple[str, ...]
    """The CRD files the dev cluster installs, relative to the operator's build directory."""
    kinds: tuple[str, ...]
    """What it runs, for messages."""
    prefix: str = ""
    """Put before the names of its RBAC objects and webhook configurations, as its own kustomization does."""


TRAINING_OPERATOR = Operator(
    "training-operator",
    "kubeflow",
    tuple(f"crds/kubeflow.org_{kind}s.yaml" for kind in ("tfjob", "pytorchjob", "mpijob", "xgboostjob", "paddlejob")),
    ("TFJob", "PyTorchJob", "MPIJob", "XGBoostJob", "PaddleJob"),
)
KUBERAY = Operator(
    "kuberay",
    "kuberay-system",
    ("crds/ray.io_rayjobs.yaml", "crds/ray.io_rayclusters.yaml", "crds/ray.io_rayservices.yaml"),
    ("RayJob", "RayCluster", "RayService"),
)
ARGO = Operator(
    "argo-workflows",
    "argo",
    # The full Workflow CRD (its schema validates what users submit); the minimal ones of the same release for the
    # kinds the controller only watches (the full ones are 2.5 MB each and slow every start of the cluster).
    ("crds/argoproj.io_workflows.yaml", *(f"crds-minimal/argoproj.io_{plural}.yaml" for plural in (
        "workflowtemplates", "clusterworkflowtemplates", "cronworkflows", "workflowtaskresults",
        "workflowtasksets", "workfloweventbindings", "workflowartifactgctasks"))),
    ("Workflow",),
)
JOBSET = Operator("jobset", jobset_operator.NAMESPACE, ("crds/jobset.x-k8s.io_jobsets.yaml",), ("JobSet",),
                  prefix=jobset_operator.PREFIX)
MPI_OPERATOR = Operator("mpi-operator", "mpi-operator", ("crds/kubeflow.org_mpijobs.yaml",), ("MPIJob",))
OPERATORS: dict[str, Operator] = {op.name: op for op in (TRAINING_OPERATOR, KUBERAY, ARGO, JOBSET, MPI_OPERATOR)}
"""Every operator the dev cluster can run, by name."""
TRAINING_SCHEMES = ("tfjob", "pytorchjob", "mpijob", "xgboostjob", "paddlejob")
CERT_SECRET = "training-operator-webhook-cert"
ARGO_CONFIGMAP = "workflow-controller-configmap"
ARGO_ENV = {"LEADER_ELECTION_DISABLE": "true", "TASK_RESULT_TIMEOUT_DURATION": "2s",
            "RECENTLY_DELETED_POD_DURATION": "2s", "DEFAULT_REQUEUE_TIME": "1s"}
"""One controller, and a step's outputs not awaited for long: no executor runs on fake nodes (docs/job-kinds.md).
A workflow waiting for that is looked at again after a second, not Argo's default ten."""
WEBHOOK_CONFIG = "validator.training-operator.kubeflow.org"


class OperatorError(DevClusterError):
    """An operator could not be built, installed or started; says which and where to look."""


@dataclass(frozen=True, slots=True)
class Built:
    """Where ``build-binaries.sh operators`` put one operator."""

    name: str
    directory: Path
    binary: str

    @property
    def executable(self) -> Path:
        return self.directory / self.binary


@cache
def built(name: str) -> Built:
    """Build (once, cached by version) and locate one operator."""
    if name not in OPERATORS:
        raise OperatorError(f"unknown operator {name!r}; choose from {', '.join(OPERATORS)}")
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "operators", name], stdout=subprocess.PIPE, stderr=sys.stderr, text=True,
        check=False,
    )
    lines = [line.split() for line in result.stdout.splitlines() if line.startswith(name + " ")]
    if result.returncode != 0 or not lines or len(lines[-1]) != 3:
        raise OperatorError(
            f"building the {name} operator failed (exit {result.returncode}); see the Go output above. "
            f"Retry with: bash {BUILD_SCRIPT} operators {name}"
        )
    _, directory, binary = lines[-1]
    return Built(name, Path(directory), binary)


def training_schemes(config: ClusterConfig) -> tuple[str, ...]:
    """The training operator's schemes on this cluster: all but ``mpijob`` where the MPI Operator runs."""
    if MPI_OPERATOR.name in config.operators:
        return tuple(scheme for scheme in TRAINING_SCHEMES if scheme != "mpijob")
    return TRAINING_SCHEMES


def crd_files(config: ClusterConfig) -> list[Path]:
    """The CRD files the cluster installs: SparkApplication's and each operator's, but for a scheme the training
    operator does not run here."""
    schemes = training_schemes(config)
    files = [SPARK_CRD]
    for name in config.operators:
        for file in OPERATORS[name].crds:
            if name != TRAINING_OPERATOR.name or any(f"_{scheme}s." in file for scheme in schemes):
                files.append(built(name).directory / file)
    return files


def parse_names(text: str) -> tuple[str, ...]:
    """``training-operator,kuberay`` -> the names; ``all`` -> every one; ``none`` or empty -> none."""
    text = text.strip()
    if text in ("", "none"):
        return ()
    if text == "all":
        return tuple(OPERATORS)
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [name for name in names if name not in OPERATORS]
    if unknown:
        raise OperatorError(f"unknown operator(s) {', '.join(unknown)}; choose from all, none, {', '.join(OPERATORS)}")
    return names


def _documents(directory: Path) -> list[Doc]:
    docs: list[Doc] = []
    for path in sorted(directory.glob("*.yaml")):
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict))
    return docs


def _items(value: object) -> list[object]:
    """A manifest's list; empty when ``value`` is no list."""
    return value if isinstance(value, list) else []


def _dicts(value: object) -> list[Doc]:
    """The objects of a manifest's list, themselves (edited in place); empty when ``value`` is no list."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _metadata(doc: Doc) -> Doc:
    """A manifest's ``metadata``, made when absent (edited in place)."""
    metadata = doc.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        raise OperatorError(f"a {doc.get('kind')} manifest's metadata is not an object")
    return metadata


_NAMESPACED = frozenset({"ServiceAccount", "Role", "RoleBinding"})


def rbac_objects(operator: Operator, directory: Path) -> list[Doc]:
    """The operator's own RBAC manifests, placed in its namespace as its kustomization would: namespaced objects
    and ServiceAccount subjects get the namespace; every ServiceAccount a binding names is created."""
    out: list[Doc] = []
    accounts: set[str] = set()
    for doc in _documents(directory):
        kind = doc.get("kind")
        metadata = _metadata(doc)
        if kind in _NAMESPACED:
            metadata["namespace"] = operator.namespace
        role = doc.get("roleRef")
        if operator.prefix:  # its own objects only: each binding names its own role and ServiceAccount
            metadata["name"] = operator.prefix + str(metadata.get("name"))
            if isinstance(role, dict):
                role["name"] = operator.prefix + str(role.get("name"))
        if kind == "ServiceAccount":
            accounts.add(str(metadata.get("name")))
        for subject in _dicts(doc.get("subjects")):
            if subject.get("kind") == "ServiceAccount":
                if operator.prefix:
                    subject["name"] = operator.prefix + str(subject.get("name"))
                subject["namespace"] = operator.namespace
                accounts.add(str(subject.get("name")))
        if kind in _NAMESPACED or kind in ("ClusterRole", "ClusterRoleBinding"):
            out.append(doc)
    present = {str(meta(doc).get("name")) for doc in out if doc.get("kind") == "ServiceAccount"}
    for name in sorted(accounts - present):
        out.append({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": operator.namespace}})
    return out


def service_account(operator: Operator, directory: Path) -> str:
    """The ServiceAccount the operator's ClusterRoleBinding binds (the identity it runs as)."""
    for doc in rbac_objects(operator, directory):
        if doc.get("kind") == "ClusterRoleBinding":
            for subject in mappings(doc.get("subjects")):
                if subject.get("kind") == "ServiceAccount":
                    return str(subject["name"])
    raise OperatorError(f"the {operator.name} RBAC manifests in {directory} bind no ServiceAccount")


def username(operator: Operator, directory: Path) -> str:
    """The user name the operator's requests carry (``--pod-creator`` of ``kq serve``)."""
    return f"system:serviceaccount:{operator.namespace}:{service_account(operator, directory)}"


def state_dir(config: ClusterConfig, operator: Operator) -> Path:
    return config.state_dir / "operators" / operator.name


def kubeconfig_path(config: ClusterConfig, operator: Operator) -> Path:
    return state_dir(config, operator) / "kubeconfig"


def _apply(kubectl: Kubectl, objects: Iterable[Obj]) -> None:
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=doc)


def install(config: ClusterConfig, kubectl: Kubectl) -> None:
    """CRDs, namespaces, identities (RBAC, tokens, kubeconfigs) and the training operator's webhook set-up of
    every operator ``config.operators`` names (and, with any, the SparkApplication CRD); idempotent."""
    if not config.operators:
        return
    files = [f"--filename={path}" for path in crd_files(config)]
    kubectl("apply", "--server-side", "--force-conflicts", *files)  # one call: the CRDs are large
    kubectl("wait", "--for=condition=Established", "--timeout=120s", *files)
    identities: list[Doc] = []
    for name in config.operators:
        operator = OPERATORS[name]
        identities.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": operator.namespace}})
        identities.extend(rbac_objects(operator, built(name).directory / "rbac"))
    _apply(kubectl, identities)
    for name in config.operators:
        operator = OPERATORS[name]
        where = built(name)
        account = service_account(operator, where.directory / "rbac")
        token = kubectl("create", "token", account, "-n", operator.namespace, f"--duration={TOKEN_LIFETIME}").strip()
        state_dir(config, operator).mkdir(parents=True, exist_ok=True)
        write_token_kubeconfig(kubeconfig_path(config, operator), config.server, config.pki, account, token)
        if operator is TRAINING_OPERATOR:
            _training_operator_webhook(config, kubectl, where)
        if operator is JOBSET:
            apply = functools.partial(_apply, kubectl)
            jobset_operator.install(config, state_dir(config, operator), where.directory, apply)
        if operator is ARGO:  # its configuration, empty: the defaults
            _apply(kubectl, [{"apiVersion": "v1", "kind": "ConfigMap", "data": {},
                              "metadata": {"name": ARGO_CONFIGMAP, "namespace": operator.namespace}}])


def _training_operator_webhook(config: ClusterConfig, kubectl: Kubectl, where: Built) -> None:
    """The Secret and certificate files the training operator's rotator accepts, and its own validating webhook
    configuration pointed at 127.0.0.1 (see the module's doc and :mod:`webhook.devcluster.operator_certs`)."""
    directory = state_dir(config, TRAINING_OPERATOR)
    certs = directory / "tmp" / "k8s-webhook-server" / "serving-certs"
    ca_file = directory / "ca.crt"
    pair = ensure_serving_files(certs, ca_file, "training-operator-ca",
                                f"training-operator.{TRAINING_OPERATOR.namespace}.svc")
    if pair is not None:
        secret = {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": CERT_SECRET, "namespace": TRAINING_OPERATOR.namespace},
            "data": pair.secret_data(),
        }
        kubectl("delete", "secret", CERT_SECRET, "-n", TRAINING_OPERATOR.namespace, "--ignore-not-found")
        _apply(kubectl, [secret])
    # The rotator checks that tls.crt exists under the fixed path /tmp/k8s-webhook-server/serving-certs (in a pod
    # the Secret is mounted there); the webhook server itself reads the files under $TMPDIR (set to ours).
    fixed = Path("/tmp/k8s-webhook-server/serving-certs")
    fixed.mkdir(parents=True, exist_ok=True)
    if not (fixed / "tls.crt").exists():
        (fixed / "tls.crt").write_bytes((certs / "tls.crt").read_bytes())
    _apply(kubectl, [training_webhook_configuration(config, where.directory / "webhooks", ca_file.read_bytes())])


def training_webhook_configuration(config: ClusterConfig, directory: Path, ca: bytes) -> Doc:
    """The operator's ValidatingWebhookConfiguration (``webhooks/manifests.yaml``), named as its kustomization
    names it, each webhook of an enabled scheme pointed at the operator on 127.0.0.1."""
    (doc,) = [d for d in _documents(directory) if d.get("kind") == "ValidatingWebhookConfiguration"]
    base = f"https://127.0.0.1:{config.ports.training_operator_webhook}"
    hooks: list[Doc] = []
    for hook in _dicts(doc.get("webhooks")):
        resources = {r for rule in mappings(hook.get("rules")) for r in _items(rule.get("resources"))}
        if not resources & {f"{scheme}s" for scheme in training_schemes(config)}:
            continue
        path = mapping(mapping(hook.get("clientConfig")).get("service")).get("path")
        if not isinstance(path, str):
            raise OperatorError(f"the webhook {hook.get('name')} in {directory} names no service path")
        hook["clientConfig"] = {"url": base + path, "caBundle": base64.b64encode(ca).decode()}
        hooks.append(hook)
    return {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "metadata": {"name": WEBHOOK_CONFIG},
            "webhooks": hooks}


def components(config: ClusterConfig) -> list[processes.Component]:
    """The operator processes ``config.operators`` names (started once the API objects are installed)."""
    out: list[processes.Component] = []
    ports = config.ports
    for name in config.operators:
        operator = OPERATORS[name]
        where = built(name)
        kubeconfig = f"--kubeconfig={kubeconfig_path(config, operator)}"
        if operator is TRAINING_OPERATOR:
            argv = (
                str(where.executable), kubeconfig,
                f"--metrics-bind-address=127.0.0.1:{ports.training_operator_metrics}",
                f"--health-probe-bind-address=127.0.0.1:{ports.training_operator_probe}",
                f"--webhook-server-port={ports.training_operator_webhook}",
                *(f"--enable-scheme={scheme}" for scheme in training_schemes(config)),
            )
            env = {"MY_POD_NAMESPACE": operator.namespace, "TMPDIR": str(state_dir(config, operator) / "tmp")}
            out.append(processes.Component(name, argv, ports.training_operator_probe, env=env))
        elif operator is ARGO:
            out.extend(_isolated(config, operator, (
                str(where.executable), kubeconfig, f"--namespace={operator.namespace}",
                f"--configmap={ARGO_CONFIGMAP}", "--loglevel=info",
            ), ARGO_ENV))
        elif operator is MPI_OPERATOR:  # its flag is spelled kubeConfig; its leader election Lease is in its namespace
            out.extend(_isolated(config, operator, (
                str(where.executable), f"--kubeConfig={kubeconfig_path(config, operator)}",
                f"--lock-namespace={operator.namespace}", "--alsologtostderr",
            ), {}))
        elif operator is JOBSET:
            out.append(jobset_operator.component(config, state_dir(config, operator), where.executable, kubeconfig))
        else:
            argv = (
                str(where.executable), kubeconfig,
                f"--metrics-addr=127.0.0.1:{ports.kuberay_metrics}",
                f"--health-probe-bind-address=127.0.0.1:{ports.kuberay_probe}",
                "--enable-leader-election=false",
                "--log-stdout-encoder=console",
            )
            out.append(processes.Component(name, argv, ports.kuberay_probe))
    return out


def _isolated(config: ClusterConfig, operator: Operator, argv: tuple[str, ...],
              env: dict[str, str]) -> list[processes.Component]:
    """An operator that takes fixed ports run in a network namespace of its own, and the relay on the host that
    carries its API connections (:mod:`webhook.devcluster.netns`)."""
    relay = state_dir(config, operator) / "api.sock"
    port = config.ports.apiserver
    return [
        processes.Component(f"{operator.name}-relay", (
            sys.executable, "-m", "webhook.devcluster.netns", "host", f"--socket={relay}", f"--port={port}")),
        processes.Component(operator.name, (
            *netns.unshare_prefix(), sys.executable, "-m", "webhook.devcluster.netns", "inside",
            f"--socket={relay}", f"--port={port}", "--", *argv), env=env),
    ]


def pod_creators(config: ClusterConfig) -> tuple[str, ...]:
    """``--pod-creator`` values for ``kq serve``: the identity of each operator the cluster runs."""
    return tuple(
        f"--pod-creator={username(OPERATORS[name], built(name).directory / 'rbac')}" for name in config.operators
    )


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1.0) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as error:
        error.close()
        return False
    except OSError:
        return False


def wait_ready(config: ClusterConfig, timeout: float = 90) -> None:
    """Wait until every operator answers ``/readyz`` (the training operator once its certificates are in place
    and its webhook serves)."""
    probes = {"training-operator": config.ports.training_operator_probe, "kuberay": config.ports.kuberay_probe,
              "jobset": config.ports.jobset_probe}
    for name in config.operators:
        log = config.logs / f"{name}.log"
        if name not in probes:  # Argo's and the MPI Operator's health checks are in their own network namespaces
            continue
        try:
            processes.wait_for(lambda p=probes[name]: _ready(p), timeout, f"the {name} operator to be ready")
        except TimeoutError as error:
            raise OperatorError(f"{error}; see {log}") from error

