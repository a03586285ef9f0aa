"""semverlite: Semantic Versioning 2.0.0 versions."""

from semverlite.version import InvalidVersion, Version

__all__ = ["InvalidVersion", "Version"]
__version__ = "0.4.2"
