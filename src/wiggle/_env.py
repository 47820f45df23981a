"""Reading WIGGLE_* environment variables: one parser for the server, the worker and the benchmark.

An empty or unset variable means "use the default"; a malformed one is an error naming the
variable and the value, never silently ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["EnvError", "env_int", "env_str"]


class EnvError(ValueError):
    """A WIGGLE_* variable holds a value that cannot be used (the message names it)."""


def env_str(name: str, default: str = "", env: Mapping[str, str] | None = None) -> str:
    """The stripped value of ``name`` in ``env`` (default ``os.environ``), or ``default`` if unset or empty."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    return raw or default


def env_int(name: str, default: int, env: Mapping[str, str] | None = None) -> int:
    """The integer value of ``name``, or ``default`` if unset or empty; EnvError if not an integer."""
    raw = env_str(name, "", env)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise EnvError(f"{name} must be an integer, got {raw!r}") from None
