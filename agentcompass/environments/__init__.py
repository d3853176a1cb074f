"""Built-in Environment providers."""

from .host_process import HostProcessEnvironment

__all__ = ["HostProcessEnvironment"]
