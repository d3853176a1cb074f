"""The docker environment's settings (``DockerConfig``), and how its containers are labelled and named.

The labels are what ``agentcompass clean`` finds a killed run's containers by (``cleanup``); a kept
container is renamed with ``KEPT_PREFIX``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from agentcompass.runtime.config import ComponentConfig, ConfigError, config_field

from ..cgroups import check_limits

LABEL_ROOT = "agentcompass"
LABEL = "agentcompass.label"
LABEL_OWNER = "agentcompass.owner"
KEPT_PREFIX = "agentcompass-kept-"

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")

_NO_IMAGE = (
    "set `image` (an image on the engine) or `dockerfile` (to build one); a task that carries its own "
    "Dockerfile (a task_dir task folder) sets them itself"
)

@dataclass(slots=True)
class DockerConfig(ComponentConfig):
    image: str | None = config_field(
        default=None,
        description="Image each session's container runs. It must already be on the engine: nothing is "
        "pulled (build one with `docker build` or `docker import`). With `dockerfile`, the tag of the built image.",
    )
    dockerfile: str | None = config_field(
        default=None,
        description="Dockerfile to build the image from, before the first session (path, relative to the "
        "working directory). Docker's build cache makes later builds quick. Base images must be on the engine: a "
        "missing one ends the session's opening with an error naming it, and the engine is never asked to pull it.",
    )
    context: str | None = config_field(
        default=None, description="Build context directory for `dockerfile` (default: the Dockerfile's directory)."
    )
    build_args: dict[str, str] = config_field(
        default={},
        description="Build arguments (ARG values) for `dockerfile`. A value may hold ${VAR} references: they "
        "are resolved only for the build itself, and every record keeps the reference.",
    )
    workdir: str | None = config_field(
        default=None,
        description="Directory in the container that commands start in and relative paths resolve against "
        "(default: the image's WORKDIR, else /workspace); created if missing.",
    )
    memory: str | None = config_field(
        default=None, description="Memory limit of the container, e.g. '512m' or '2g' (docker --memory); null: no limit."
    )
    cpus: float | None = config_field(
        default=None, description="CPU limit in cores, e.g. 1.5 (docker --cpus); null: no limit."
    )
    pids_limit: int | None = config_field(
        default=None, description="Most processes the container may hold at once (docker --pids-limit); null: no limit."
    )
    docker_host: str | None = config_field(
        default=None,
        description="The engine's API socket, e.g. 'unix:///run/user/1000/podman/podman.sock' for a rootless "
        "Podman (`podman system service`) or 'unix:///var/run/docker.sock'; null: DOCKER_HOST, else Docker's "
        "default socket.",
    )
    network: str = config_field(
        default="bridge",
        description="Docker network the container is on in a 'public' phase; a 'none' phase disconnects it "
        "from every network and a switch back reconnects it.",
    )
    missing_image_hint: str | None = config_field(
        default=None,
        description="What the error for an `image` that is not on the engine tells the user to do (the command "
        "that pulls or builds it); a Recipe sets it for the images it names. null: a generic hint.",
    )
    keep: str = config_field(
        default="never",
        choices=["never", "on_failure", "always"],
        description="What happens to the container when the session closes: 'never' removes it; 'on_failure' "
        "keeps it when the session ends failed (an exception leaves `async with`, or close(failed=True)); "
        "'always' keeps it. A kept container keeps running, renamed agentcompass-kept-<label>, for "
        "`docker exec`; `agentcompass clean --all` removes it.",
    )

    def __post_init__(self) -> None:
        # `image` or `dockerfile` may come from a Recipe (a task's own Dockerfile): checked per plan
        check_limits(self)
        if not isinstance(self.build_args, dict):
            raise ConfigError(f"build_args must be a mapping of names to values, got {self.build_args!r}")
        self.build_args = {str(k): str(v) for k, v in self.build_args.items()}
        if self.network in ("none", "host", ""):
            raise ConfigError(
                f"network {self.network!r} cannot be used: name a bridge network (default 'bridge'); "
                "a 'none' phase is set with the phase's network policy"
            )
        if self.workdir is not None and not posixpath.isabs(self.workdir):
            raise ConfigError(f"workdir must be an absolute path in the container, got {self.workdir!r}")
