"""Starting and stopping the dev cluster's processes: one pid file and one log per component."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Component:
    """A process of the dev cluster."""

    name: str
    argv: tuple[str, ...]
    port: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)


def pid_file(run_dir: Path, name: str) -> Path:
    return run_dir / f"{name}.pid"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def running_pid(run_dir: Path, name: str, marker: str) -> int | None:
    """The pid of component ``name`` when its process is alive and is ours (its command line holds
    ``marker``, so a recycled pid is never mistaken for it)."""
    path = pid_file(run_dir, name)
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    cmdline = _cmdline(pid)
    if not cmdline or marker not in cmdline or _exited(pid):
        return None
    return pid


def start(component: Component, run_dir: Path, log_dir: Path) -> int:
    """Start a component in its own session (so a stop can take its whole process group)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(component.env)
    log = str(log_dir / f"{component.name}.log")
    # posix_spawn, not Popen: the process outlives this one, and no Popen object is left to warn about it.
    pid = os.posix_spawn(
        component.argv[0],
        list(component.argv),
        env,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ],
        setsid=True,
    )
    pid_file(run_dir, component.name).write_text(f"{pid}\n")
    return pid


def stop(run_dir: Path, name: str, marker: str, grace: float = 10.0) -> bool:
    """Stop a component (SIGTERM to its process group, SIGKILL after ``grace`` seconds).

    Returns whether a process was stopped. The pid file is removed either way.
    """
    pid = running_pid(run_dir, name, marker)
    path = pid_file(run_dir, name)
    if pid is None:
        path.unlink(missing_ok=True)
        return False
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if running_pid(run_dir, name, marker) is None:
            break
        time.sleep(0.1)
    else:
        _signal_group(pid, signal.SIGKILL)
        kill_deadline = time.monotonic() + 5
        while time.monotonic() < kill_deadline and running_pid(run_dir, name, marker) is not None:
            time.sleep(0.05)
    # A process on its way out reads an empty command line before it has exited (its memory goes first):
    # wait until it is gone or a zombie, so that nothing of it (a port, a file) outlives the stop.
    exit_deadline = time.monotonic() + 5
    while time.monotonic() < exit_deadline and not _exited(pid):
        time.sleep(0.02)
    _reap(pid)
    path.unlink(missing_ok=True)
    return True


def _exited(pid: int) -> bool:
    """Whether process ``pid`` has exited: no longer listed, or a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def busy_ports(ports: Sequence[int]) -> list[int]:
    """The ports of ``ports`` on which something listens."""
    return [port for port in ports if port_open(port)]


def wait_for(check: object, timeout: float, what: str, interval: float = 0.2) -> None:
    """Poll ``check()`` until it returns true; ``TimeoutError`` naming ``what`` otherwise."""
    assert callable(check)
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as error:  # any failure of a probe means "not yet"
            last_error = error
        time.sleep(interval)
    detail = f" (last error: {last_error})" if last_error else ""
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
