"""The docker environment's engine: its client, its faults, and Podman's.

Engine calls run on threads of their own (``_in_thread``). The engine's faults are told apart
here (``_lost_engine``, ``_refused``, ``_opening_fault``, ``_translated``) and leave as the types
of ``runtime.base``. A Podman engine serves the same provider: ``podman_host`` says what it runs
on, and ``_refuse_unenforced_limits`` refuses the limits it would accept and not enforce.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, Callable

from agentcompass.runtime.base import EnvironmentUnavailableError, InfrastructureError

from ..cgroups import LimitsUnavailableError
from .config import DockerConfig


def _in_thread(fn: Callable, *args, **kwargs) -> asyncio.Future:
    """``fn`` on a thread of its own: engine calls may block for as long as a command runs."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.cancelled():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def work() -> None:
        try:
            result, error = fn(*args, **kwargs), None
        except BaseException as exc:  # handed to the awaiting coroutine
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:
            pass  # the loop has closed: nobody waits any more

    threading.Thread(target=work, name="agentcompass-docker", daemon=True).start()
    return future


def _where(host: str | None = None) -> str:
    return host or os.environ.get("DOCKER_HOST") or "the default socket"


def _engine(host: str | None = None):
    import docker

    try:
        if host:
            client = docker.DockerClient(base_url=host, timeout=120)
            client.ping()
            return client
        return docker.from_env(timeout=120)
    except (docker.errors.DockerException, OSError) as exc:
        raise EnvironmentUnavailableError(
            f"docker environment: no Docker engine answers at {_where(host)} ({exc}); start one "
            "(e.g. .ci/docker-up.sh, or `podman system service` for Podman) and set `docker_host` or "
            "DOCKER_HOST, or use the host_process environment"
        ) from None


# The engine's faults are told apart here, where the docker SDK is called, and
# leave this module as the types of runtime.base: the run stage decides retries by type.


def _lost_engine(exc: BaseException) -> bool:
    """Whether ``exc`` means the engine stopped answering: a refused, reset or timed-out connection."""
    import requests

    return isinstance(exc, (
        requests.exceptions.ConnectionError, requests.exceptions.Timeout,
        requests.exceptions.ChunkedEncodingError, ConnectionError,
    ))


def _refused(exc: BaseException, doing: str) -> RuntimeError:
    # the engine answered and said no: a request it will refuse again, not a fault
    return RuntimeError(f"docker environment: the engine refused {doing}: {getattr(exc, 'explanation', None) or exc}")


def _opening_fault(exc: Exception, doing: str, host: str | None = None) -> Exception:
    """``exc``, raised while a session was being opened (``doing``), as the fault it is."""
    import docker

    if isinstance(exc, InfrastructureError):
        return exc
    if _lost_engine(exc):
        return EnvironmentUnavailableError(
            f"docker environment: the Docker engine at {_where(host)} stopped answering while {doing} ({exc})"
        )
    if isinstance(exc, docker.errors.APIError):
        if exc.is_server_error():
            return EnvironmentUnavailableError(
                f"docker environment: the engine failed while {doing}: {exc.explanation or exc}"
            )
        return _refused(exc, doing)
    return exc


def _translated(fault: Callable[[Exception], Exception], fn: Callable, *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)``; what it raises leaves as ``fault`` translates it."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        translated = fault(exc)
        if translated is exc:
            raise
        raise translated from exc


# Each limit and the cgroup controller that enforces it.
_LIMIT_CONTROLLERS = (("memory", "memory"), ("cpus", "cpu"), ("pids_limit", "pids"))


def podman_host(client) -> dict | None:
    """What a Podman engine says of its host (``security.rootless``, ``cgroupVersion``,
    ``cgroupManager``, ``cgroupControllers``); None when the engine is Docker's."""
    components = client.version().get("Components") or []
    if not any(c.get("Name") == "Podman Engine" for c in components):
        return None
    api = client.api
    # the libpod API beside the Docker-compatible one: its info says what the compatible one does not
    response = api._get(f"{api.base_url}/v4.0.0/libpod/info")
    api._raise_for_status(response)
    return response.json()["host"]


def _refuse_unenforced_limits(config: DockerConfig, host: dict | None) -> None:
    """Refuse limits a Podman engine would accept and not enforce (rootless without delegated cgroups)."""
    wanted = [(name, controller) for name, controller in _LIMIT_CONTROLLERS if getattr(config, name) is not None]
    if host is None or not wanted:
        return  # Docker enforces each limit it accepts
    controllers = set(host.get("cgroupControllers") or [])
    missing = [name for name, controller in wanted if controller not in controllers]
    if not missing:
        return
    rootless = "rootless " if (host.get("security") or {}).get("rootless") else ""
    raise LimitsUnavailableError(
        f"docker environment: the engine at {_where(config.docker_host)} is {rootless}Podman on cgroup {host.get('cgroupVersion')} "
        f"with the {host.get('cgroupManager')} cgroup manager, which has no cgroup controller for "
        f"{', '.join(missing)} (it would run the container without the limit)",
        tuple(missing),
        "run Podman as root, or rootless on cgroup v2 with the systemd cgroup manager and the memory, cpu "
        "and pids controllers delegated to the user",
    )
