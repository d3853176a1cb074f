"""``docker``: one container per session on a real Docker engine (or Podman's), through the docker SDK.

The container starts on a Docker network and a ``none`` phase disconnects it
from every network (a container created with ``network_mode='none'`` could
never join one later). Commands run through ``docker exec``; the timeout is
enforced from here and ends every process the command started, found by a
marker in their environment. Files move with ``put_archive`` and
``get_archive``. At the end of the session the container is removed unless
``keep`` says otherwise. Nothing is pulled from a registry: the image must be
on the engine or built from a Dockerfile.

The modules: ``config`` (``DockerConfig``, the containers' labels), ``engine``
(the client, the engine's faults, Podman), ``images`` (the image a session
runs, built from a Dockerfile), ``streams`` (exec streams and archives),
``session`` (``DockerSession``), ``provider`` (``DockerEnvironment``) and
``cleanup`` (what ``agentcompass clean`` removes).
"""

from .config import DockerConfig
from .provider import DockerEnvironment

__all__ = ["DockerConfig", "DockerEnvironment"]
