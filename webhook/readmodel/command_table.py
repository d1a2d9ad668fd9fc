"""``kq``'s commands: each one's name, aliases, one-line help and the module that registers it.

``kq --help`` lists the commands from this table without importing a command module (the service's modules
pull in aiohttp and kubernetes-asyncio, most of a second); ``kq NAME`` imports only NAME's module. Each
module's ``register`` takes its command's help and aliases from here (``command_parser`` in
:mod:`webhook.readmodel.commandline`), so the listing and the command's own parser say the same. Both faces
read it (``kq console`` is one of the commands), so it lives under them and imports the standard library only.
"""

from __future__ import annotations

from typing import Final, NamedTuple


class Command(NamedTuple):
    """One command (a named tuple, not a dataclass: ``kq`` imports this before anything else, and the
    dataclasses module alone costs its start a few milliseconds)."""

    name: str
    module: str
    help: str
    aliases: tuple[str, ...] = ()


TABLE: Final = (
    Command("dev", "webhook.cli.dev", "the local dev cluster (real Kubernetes built from source, kwok nodes)"),
    Command("serve", "webhook.cli.serve", "run the admission webhook service"),
    Command("certs", "webhook.cli.certs", "write a CA and a serving certificate for the webhook"),
    Command("extender", "webhook.cli.extender", "run the kube-scheduler extender (filter, prioritize, preempt)"),
    Command("simulate", "webhook.cli.simulate",
            "replay a scenario (quota tree, nodes, timed job submissions) on a virtual clock"),
    Command("submit", "webhook.cli.submit",
            "create a job (Job, PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, RayJob) from a few flags"),
    Command("list", "webhook.cli.jobs",
            "list jobs with status (QUEUING/BACKOFF/PENDING/RUNNING/SUCCEEDED/FAILED) and queue position", ("ls",)),
    Command("get", "webhook.cli.jobs", "show one job: status, queue, request, pods and events"),
    Command("delete", "webhook.cli.jobs", "delete jobs (their pods go too)"),
    Command("why", "webhook.cli.why",
            "explain why a job waits: quota level, resource, shortfall, who is ahead, reclaim"),
    Command("logs", "webhook.cli.logs", "print or follow a job's logs (chief pod by default)"),
    Command("top", "webhook.cli.quota", "show quota usage"),
    Command("queue", "webhook.cli.quota", "the Queues: list them, or show one with its waiting jobs"),
    Command("console", "webhook.console.command",
            "serve the web console: jobs, why they wait, logs, submit; the quota tree for operators"),
)
"""In the order ``kq --help`` lists them (a module's commands next to each other)."""


def command(name: str) -> Command:
    """Command ``name`` (a ``KeyError`` for a name not in :data:`TABLE`: a wiring error)."""
    for known in TABLE:
        if known.name == name:
            return known
    raise KeyError(f"kq has no command {name!r} in its command table")

