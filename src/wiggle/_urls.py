"""A connection string with its password hidden, for any message that quotes one.

libpq quotes a string it cannot parse back in its error (``missing "=" after "mysql://u:hunter2@h"``),
and a database that cannot be reached is named in Wiggle's own messages: both go through
``without_password`` (wiggle/_storage/postgres/db.py, wiggle/cli.py) so a password never reaches a
terminal or a log.
"""

from __future__ import annotations

import re

__all__ = ["bare_host", "host_address", "without_password"]

_KEY_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")


def without_password(url: str) -> str:
    """``url`` with its password (``user:PASSWORD@`` of a URL, ``password=`` of a URL's query or
    a ``key=value`` string) shown as ``****``: for a message that quotes the string."""
    scheme, sep, rest = url.partition("://")
    if sep:
        netloc, slash, tail = rest.partition("/")
        credentials, at, hosts = netloc.rpartition("@")
        user, colon, _ = credentials.partition(":")
        if at and colon:
            url = f"{scheme}://{user}:****@{hosts}{slash}{tail}"
    return _KEY_PASSWORD.sub(r"\1****", url)


def bare_host(host: str) -> str:
    """``host`` as a socket binds it: an IPv6 literal without its brackets (``[::1]`` -> ``::1``);
    anything else as given."""
    inner = host.strip()
    if inner.startswith("[") and inner.endswith("]"):
        inner = inner[1:-1]
    return inner if ":" in inner else host


def host_address(host: str, port: int | str) -> str:
    """``host:port`` as gRPC and a client take it: an IPv6 literal in brackets (``[::1]:50051``),
    whether ``host`` came with them (``--host '[::1]'``) or not (``--host ::1``)."""
    bare = bare_host(host)
    return f"[{bare}]:{port}" if ":" in bare else f"{bare}:{port}"
