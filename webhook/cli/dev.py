"""``kq dev up|down|status|restart|env``: the local dev cluster."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from webhook.cli import devsystem as system
from webhook.cli.args import Subparsers
from webhook.devcluster import cluster, operators
from webhook.devcluster.config import ClusterConfig, Ports, default_nodes, default_state_dir
from webhook.readmodel.commandline import command_parser


def config_from_args(args: argparse.Namespace) -> ClusterConfig:
    """The cluster configuration named by the command line (and ``KQ_DEV_*`` variables)."""
    state_dir = Path(args.dir).resolve() if args.dir else default_state_dir()
    base = args.port_base or int(os.environ.get("KQ_DEV_PORT_BASE", "16400"))
    nodes = default_nodes(
        regular=getattr(args, "nodes", 4),
        cpu=getattr(args, "node_cpu", "32"),
        memory=getattr(args, "node_memory", "128Gi"),
        gpus=getattr(args, "node_gpus", 4),
        virtual=getattr(args, "virtual_nodes", 1),
    )
    chosen = getattr(args, "operators", None)
    if chosen is None:  # the commands that do not start the cluster: the operators it was started with
        found = state_dir / "operators"
        running = tuple(name for name in operators.OPERATORS if (found / name / "kubeconfig").exists())
    else:
        running = operators.parse_names(chosen)
    return ClusterConfig(
        state_dir=state_dir,
        ports=Ports(base),
        nodes=nodes,
        with_service=not getattr(args, "no_service", False),
        service_args=tuple(getattr(args, "service_arg", None) or ()),
        operators=running if not getattr(args, "no_service", False) else (),
    )


def _up(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
        bins = system.up(config)
        if args.seed:
            system.install_seed(config, bins)
    except cluster.DevClusterError as error:
        print(f"kq dev up: {error}", file=sys.stderr)
        return 1
    print(_env_lines(config, bins))
    print(system.next_steps(config, seeded=args.seed))
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster.down(config_from_args(args), purge=args.purge)
    return 0


def _status(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    current = cluster.status(config, (*cluster.ORDER, *config.operators))
    for name, pid in current.running.items():
        print(f"{name:<26} {'running pid ' + str(pid) if pid else 'stopped'}")
    print(f"{'api':<26} {'ready ' + config.server if current.api_ready else 'not ready'}")
    return 0 if current.all_running and current.api_ready else 1


def _restart(args: argparse.Namespace) -> int:
    """Restart ``kq serve`` with other flags or environment (the seed's "edit the controller's arguments and
    restart it"), e.g. ``kq dev restart --env StrictPriority=true --service-arg=--oversellrate=1``."""
    config = config_from_args(args)
    env: dict[str, str] = {}
    for item in args.env or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"kq dev restart: --env takes NAME=VALUE, got {item!r}", file=sys.stderr)
            return 2
        env[key] = value
    if not cluster.status(config).api_ready:
        print("kq dev restart: the dev cluster is not running; start it with `kq dev up`", file=sys.stderr)
        return 1
    try:
        system.restart_service(config, cluster.binaries_dir(), env)
    except cluster.DevClusterError as error:
        print(f"kq dev restart: {error}", file=sys.stderr)
        return 1
    flags = " ".join(config.service_args) or "(no extra flags)"
    environment = " ".join(f"{key}={value}" for key, value in env.items()) or "(no extra environment)"
    print(f"kq serve restarted with {flags}, {environment}")
    return 0


def _env(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    print(_env_lines(config, cluster.binaries_dir()))
    return 0


def _env_lines(config: ClusterConfig, bins: Path) -> str:
    """kubectl (the cluster's own build) and kq (this installation) first on PATH, KUBECONFIG set."""
    kq_dir = Path(sys.argv[0]).resolve().parent if sys.argv and sys.argv[0] else Path(sys.executable).parent
    return f"export KUBECONFIG={config.kubeconfig}\nexport PATH={bins}:{kq_dir}:$PATH"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", help="state directory (default: .dev in the repository, or $KQ_DEV_DIR)")
    parser.add_argument(
        "--port-base", type=int, default=0, help="first of 10 loopback ports (default 16400, $KQ_DEV_PORT_BASE)"
    )


def register(subparsers: Subparsers) -> None:
    dev = command_parser(
        subparsers,
        "dev",
        "A real Kubernetes control plane on loopback with fake (kwok) nodes.",
        ["kq dev up", 'eval "$(kq dev env)" && kubectl get nodes', "kq dev down"],
        wrap=False,
    )
    sub = dev.add_subparsers(dest="dev_command", metavar="SUBCOMMAND", required=True)
    up = sub.add_parser("up", help="start the cluster and the system (idempotent)")
    _common(up)
    up.add_argument("--nodes", type=int, default=4, help="regular (ECS) nodes (default 4)")
    up.add_argument("--node-cpu", default="32", help="CPU per regular node (default 32)")
    up.add_argument("--node-memory", default="128Gi", help="memory per regular node (default 128Gi)")
    up.add_argument("--node-gpus", type=int, default=4, help="nvidia.com/gpu per regular node (default 4)")
    up.add_argument("--virtual-nodes", type=int, default=1, help="virtual-kubelet nodes (default 1)")
    up.add_argument("--no-service", action="store_true", help="only the control plane, not our service")
    up.add_argument(
        "--operators", default="all", metavar="NAMES",
        help="job operators to run: all (default), none, or a comma list of "
        f"{', '.join(operators.OPERATORS)} (docs/job-kinds.md)",
    )
    up.add_argument(
        "--seed", action="store_true", help="also apply examples/seed/ (namespaces user-a/b/c, quota tree, priorities)"
    )
    up.add_argument(
        "--service-arg", action="append", help="extra argument for `kq serve` (repeatable), e.g. --oversellrate=1"
    )
    up.set_defaults(handler=_up)
    down = sub.add_parser("down", help="stop every process of the cluster")
    _common(down)
    down.add_argument("--purge", action="store_true", help="also delete the state directory (etcd data, certs)")
    down.set_defaults(handler=_down)
    st = sub.add_parser("status", help="which components run")
    _common(st)
    st.set_defaults(handler=_status)
    restart = sub.add_parser(
        "restart",
        help="restart kq serve with other flags or environment",
        description="Restart the dev cluster's kq serve; the flags and environment given replace the previous "
        "ones (the seed's scenario 2: kq dev restart --env StrictPriority=true --service-arg=--oversellrate=1).",
    )
    _common(restart)
    restart.add_argument(
        "--service-arg", action="append", help="extra argument for `kq serve` (repeatable), e.g. --oversellrate=1"
    )
    restart.add_argument("--env", action="append", metavar="NAME=VALUE", help="environment for `kq serve` (repeatable)")
    restart.set_defaults(handler=_restart)
    env = sub.add_parser("env", help="print the export lines for kubectl")
    _common(env)
    env.set_defaults(handler=_env)
