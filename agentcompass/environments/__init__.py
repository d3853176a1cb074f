"""Built-in Environment providers."""

from .docker import DockerEnvironment
from .host_process import HostProcessEnvironment

__all__ = ["DockerEnvironment", "HostProcessEnvironment"]
