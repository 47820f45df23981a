"""Server configuration: WIGGLE_* environment variables, the same names as CLI flags."""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Mapping
from typing import Annotated, NamedTuple, get_type_hints
from urllib.parse import urlsplit

import msgspec

from .._env import env_str, environment
from .._loop import check_event_loop
from .._model import ExecutionMode
from .._urls import without_password
from ..errors import InvalidArgument

__all__ = [
    "ServerConfig",
    "Setting",
    "SETTINGS",
    "BOUNDS",
    "DECLARED",
    "OLD_FLAGS",
    "check_config",
    "database_address",
    "without_password",
    "env_name",
    "flag_name",
    "server_variable",
]

log = logging.getLogger("wiggle.server")


class Setting(NamedTuple):
    """What a ServerConfig field says about itself: its help, its bounds, its older names.

    The variable is ``WIGGLE_<FIELD>`` and the flag ``--<field>``; a name in ``old`` (a variable
    or a flag the setting had before it followed its field) is still read, with a warning.
    """

    help: str
    low: float | None = None
    high: float | None = None
    old: tuple[str, ...] = ()


_PORT = (0, 65535)


class ServerConfig(msgspec.Struct, kw_only=True):
    """Every server setting, declared once: ``SETTINGS``, ``BOUNDS``, the ``wiggle server``
    flags and the README's table (scripts/gen_settings_table.py) are made from these fields."""

    host: Annotated[
        str, Setting("address the gRPC server binds; an IPv6 address with or without brackets (::1, [::1])")
    ] = "127.0.0.1"
    port: Annotated[int, Setting("gRPC port (0 picks a free port)", *_PORT)] = 7233
    upstream_port: Annotated[
        int,
        Setting(
            "a second gRPC port serving both protocols, e.g. 8080 for upstream Wiggle's clients (0: none)",
            *_PORT,
        ),
    ] = 0
    database_url: Annotated[str, Setting("postgresql:// URL; unset: the in-memory store")] = ""
    database_schema: Annotated[str, Setting("PostgreSQL schema holding Wiggle's tables")] = "wiggle"
    execution_mode: Annotated[
        ExecutionMode,
        Setting("what a definition's DEFAULT mode resolves to: SERVER, LOCAL_SYNC or LOCAL_ASYNC"),
    ] = ExecutionMode.SERVER
    lease_millis: Annotated[
        int,
        Setting("lease on a claimed step; an expired lease is a retryable failure", 100, 24 * 3600 * 1000),
    ] = 30_000
    max_lease_millis: Annotated[
        int,
        Setting(
            "the longest lease a claim or heartbeat of the upstream protocol may ask for (shorter asks are raised to 1000)",
            1000,
            24 * 3600 * 1000,
        ),
    ] = 600_000
    max_local_steps: Annotated[
        int,
        Setting(
            "server cap on one local run's length (0: none)", 0, 1 << 31, old=("WIGGLE_LOCAL_MAX_STEPS",)
        ),
    ] = 1000
    max_payload_bytes: Annotated[
        int, Setting("limit on a context, step result or user-task payload", 1024, 1 << 30)
    ] = 1 << 20
    max_instance_steps: Annotated[int, Setting("runaway guard: steps one instance may take", 1, 1 << 62)] = (
        100_000
    )
    join_diffs: Annotated[
        bool,
        Setting(
            "a fork's join keeps each branch's changes, not its whole context (much less to write "
            "for wide forks over large contexts); turn on once every server runs this release "
            "(docs/upgrading.md#compact-joins)"
        ),
    ] = False
    retention_seconds: Annotated[
        int,
        Setting(
            "seconds finished instances are kept before the purge",
            0,
            100 * 365 * 24 * 3600,
            old=("WIGGLE_RETENTION",),
        ),
    ] = 3 * 24 * 3600
    http_port: Annotated[
        int,
        Setting(
            "the HTTP port: the dashboard, /metrics, /healthz and /readyz (0: off); with --processes N, "
            "process i on this port + i",
            *_PORT,
            old=("WIGGLE_METRICS_PORT", "--metrics-port"),
        ),
    ] = 0
    pool_size: Annotated[int, Setting("PostgreSQL connections per server process", 1, 1000)] = 10
    group_commits: Annotated[
        int,
        Setting(
            "PostgreSQL: groups of reports committed at once per server process, at most pool_size - 2 "
            "(more is refused; docs/performance.md#group-commits)",
            1,
            16,
        ),
    ] = 1
    stall_timeout_millis: Annotated[
        int,
        Setting(
            "PostgreSQL: a server stalled this long (frozen, paused, cut off) inside a transaction, or as "
            "the clock leader, has its session ended by PostgreSQL, so its row locks and the clock duties "
            "go to the other servers (docs/failover.md#a-server-that-hangs-instead-of-dying)",
            1000,
            3600 * 1000,
        ),
    ] = 10_000
    context_search_fields: Annotated[
        str,
        Setting(
            "PostgreSQL: comma-separated context fields to index for the ctx.FIELD = VALUE search "
            "(each index slows every step's write; docs/dashboard.md#searching)"
        ),
    ] = ""
    processes: Annotated[
        int,
        Setting(
            "server processes sharing the port (PostgreSQL only); one that ends on its own stops the "
            "others, and its exit status is the command's",
            1,
            256,
        ),
    ] = 1
    reuse_port: Annotated[
        bool,
        Setting(
            "share the gRPC port with other server processes (SO_REUSEPORT; set for --processes' "
            "children; PostgreSQL only)",
            old=("WIGGLE_REUSEPORT",),
        ),
    ] = False
    stop_grace_seconds: Annotated[
        float,
        Setting(
            "on SIGTERM/SIGINT: seconds the calls in flight (reports, starts) get to finish before "
            "they are cut (docs/operations.md#stopping-a-server)",
            0,
            3600,
        ),
    ] = 5.0
    event_loop: Annotated[
        str,
        Setting(
            "wiggle server's process: auto (uvloop where installed, else asyncio's), asyncio or uvloop "
            "(docs/performance.md#the-server-process)"
        ),
    ] = "auto"
    gc_threshold: Annotated[
        int,
        Setting(
            "wiggle server's process: allocations between young garbage collections, its start-up "
            "objects frozen out of them (0: Python's collector as it is; docs/performance.md#the-server-process)",
            0,
            10_000_000,
        ),
    ] = 20_000
    # securing a deployment (docs/semantics.md#security)
    tls_cert: Annotated[str, Setting("PEM server certificate: TLS on the gRPC and HTTP ports")] = ""
    tls_key: Annotated[str, Setting("PEM private key of --tls-cert")] = ""
    tls_client_ca: Annotated[
        str, Setting("PEM CA bundle; client certificates signed by it required (mTLS)")
    ] = ""
    auth_file: Annotated[str, Setting("JSON identity file: hashed tokens and certificate names -> roles")] = (
        ""
    )
    insecure: Annotated[bool, Setting("allow a non-loopback bind without TLS and authentication")] = False
    open_metrics: Annotated[bool, Setting("serve /metrics and /healthz without a credential")] = False
    reload_seconds: Annotated[
        float,
        # at least a second: a check only stats the files, more often is work for nothing (-1
        # and 0 were taken, app.py's _reload_loop then checking ten times a second); at most a
        # day, so a renewed certificate or a revoked identity is seen within the day
        Setting("seconds between checks of the TLS and identity files", 1, 24 * 3600),
    ] = 10.0
    # the dashboard's sign-in and origin (docs/dashboard.md#signing-in)
    session_idle_seconds: Annotated[
        int, Setting("dashboard sign-in: a session unused this long ends", 60, 30 * 24 * 3600)
    ] = 1800
    session_max_seconds: Annotated[
        int,
        Setting(
            "dashboard sign-in: a session ends this long after sign-in, used or not", 60, 366 * 24 * 3600
        ),
    ] = 12 * 3600
    http_origin: Annotated[
        str,
        Setting(
            "the dashboard's public origin (https://wiggle.example.com) when browsers reach it by a name "
            "or through a proxy; unset: loopback addresses and this host's names"
        ),
    ] = ""
    http_trusted_header: Annotated[
        str, Setting("SSO proxy: the request header naming the signed-in identity (e.g. X-Forwarded-User)")
    ] = ""
    http_trusted_proxies: Annotated[
        str, Setting("SSO proxy: comma-separated addresses or networks the trusted header is taken from")
    ] = ""
    # bounds
    max_live_instances: Annotated[
        int,
        Setting(
            "memory store: instances held at once, finished ones evicted first (0: no bound)", 0, 1 << 31
        ),
    ] = 100_000
    max_memory_bytes: Annotated[
        int,
        Setting(
            "memory store: bytes of contexts and history held at once, finished instances evicted "
            "first (0: no bound)",
            0,
            1 << 50,
        ),
    ] = 1 << 30
    purge_interval_seconds: Annotated[
        float,
        # at least a second: each purge is a query (a commit on PostgreSQL) even when nothing is
        # old enough, and 0 made an idle server purge in a loop (~1,800 commits a second); at
        # most a day, so finished instances do not pile up for long past their retention
        Setting(
            "seconds between purges of instances finished longer than the retention",
            1,
            24 * 3600,
            old=("WIGGLE_PURGE_INTERVAL",),
        ),
    ] = 60.0
    queue_lag_warn_millis: Annotated[
        int, Setting("warn when a queue's oldest ready step waited this long", 1, 7 * 24 * 3600 * 1000)
    ] = 30_000
    queue_lag_clear_millis: Annotated[
        int, Setting("the lag ends below this age (0: half the warning threshold)", 0, 7 * 24 * 3600 * 1000)
    ] = 0
    queue_lag_interval_millis: Annotated[int, Setting("how often queues are checked", 10, 3600 * 1000)] = (
        5_000
    )


def _declared() -> dict[str, Setting]:
    hints = get_type_hints(ServerConfig, include_extras=True)
    return {
        name: next(m for m in hints[name].__metadata__ if isinstance(m, Setting))
        for name in ServerConfig.__struct_fields__
    }


#: Each field's Setting, in declaration order (the order of the README's table).
DECLARED: dict[str, Setting] = _declared()


def env_name(field: str) -> str:
    """The variable of a setting: WIGGLE_ + its field's name in capitals."""
    return "WIGGLE_" + field.upper()


def flag_name(field: str) -> str:
    """The ``wiggle server`` flag of a setting: -- + its field's name, dashed."""
    return "--" + field.replace("_", "-")


#: (field, env var, help) for every setting, in the order the README documents them.
SETTINGS: list[tuple[str, str, str]] = [(field, env_name(field), s.help) for field, s in DECLARED.items()]

#: The smallest (and largest) value each bounded numeric setting accepts.
BOUNDS: dict[str, tuple[float, float]] = {
    field: (s.low, s.high) for field, s in DECLARED.items() if s.low is not None and s.high is not None
}

#: An older variable name -> the field it sets (read with a deprecation warning).
OLD_VARIABLES: dict[str, str] = {
    old: field for field, s in DECLARED.items() for old in s.old if old.startswith("WIGGLE_")
}
#: An older flag -> the field it sets.
OLD_FLAGS: dict[str, str] = {
    old: field for field, s in DECLARED.items() for old in s.old if old.startswith("--")
}


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _convert(field: str, raw: str) -> object:
    default = getattr(ServerConfig(), field)
    if isinstance(default, ExecutionMode):
        try:
            return ExecutionMode(raw.strip().upper())
        except ValueError:
            raise InvalidArgument(
                f"execution mode {raw!r} is not one of SERVER, LOCAL_SYNC, LOCAL_ASYNC"
            ) from None
    if isinstance(default, bool):
        if raw.strip().lower() in _TRUE:
            return True
        if raw.strip().lower() in _FALSE:
            return False
        raise InvalidArgument(f"{_named(field)} must be true or false, got {raw!r}")
    if isinstance(default, float):
        try:
            return float(raw)
        except ValueError:
            raise InvalidArgument(f"{_named(field)} must be a number, got {raw!r}") from None
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise InvalidArgument(f"{_named(field)} must be an integer, got {raw!r}") from None
    return raw


def _named(field: str) -> str:
    """A setting as a person sets it: its flag and its variable (``--pool-size (WIGGLE_POOL_SIZE)``)."""
    return f"{flag_name(field)} ({env_name(field)})"


def server_variable(field: str, env: Mapping[str, str] | None = None) -> str:
    """The stripped value of a server setting's variable ('' when unset), for a command that
    runs next to a server with its environment (``wiggle doctor``, ``wiggle ready``)."""
    return env_str(env_name(field), "", env)


def database_address(url: str) -> str:
    """Where a database URL points, without its password, for a message: ``user@host:port/db``
    (several hosts comma-separated), from a ``postgresql://`` URL or a libpq ``key=value``
    string. What the string leaves out (libpq takes it from PG* variables or its defaults) is
    left out here too."""
    params: dict[str, str] = {}
    try:
        from psycopg.conninfo import conninfo_to_dict  # libpq's own reading, both forms

        params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    except Exception:  # noqa: BLE001 -- no psycopg, or a string libpq cannot read: read a URL by hand
        _, _, rest = url.partition("://")
        netloc, _, path = rest.partition("/")
        credentials, at, hosts = netloc.rpartition("@")
        user = credentials.partition(":")[0] if at else ""
        params = {"user": user, "host": hosts, "dbname": path.partition("?")[0]}
    names = (params.get("host") or params.get("hostaddr") or "").split(",")
    ports = params.get("port", "").split(",")
    if len(ports) == 1:  # one port for every host
        ports *= len(names)
    # no host: libpq's local socket, which psql's prompt calls [local]
    where = ",".join(h + (f":{p}" if p else "") for h, p in zip(names, ports, strict=False) if h) or "[local]"
    user = params.get("user", "")
    dbname = params.get("dbname", "")
    return f"{user + '@' if user else ''}{where}{'/' + dbname if dbname else ''}"


def from_mapping(
    values: Mapping[str, object], env: Mapping[str, str] | None = None, warn: bool = True
) -> ServerConfig:
    """Settings from ``env`` (default: the process environment), overridden by non-None ``values`` (CLI flags).

    A variable's older name (OLD_VARIABLES) is read too, with a warning (unless not ``warn``: the
    children of ``--processes``, whose parent warned), unless the new one is set.
    """
    env = environment() if env is None else env
    kwargs: dict[str, object] = {}
    for old, field in OLD_VARIABLES.items():
        if env.get(old, "") != "" and env.get(env_name(field), "") == "":
            if warn:
                log.warning("%s is deprecated: set %s instead", old, env_name(field))
            kwargs[field] = _convert(field, env[old])
    for field, var, _ in SETTINGS:
        if var in env and env[var] != "":
            kwargs[field] = _convert(field, env[var])
        value = values.get(field)
        if value is not None:
            kwargs[field] = _convert(field, str(value)) if isinstance(value, str) else value
    if "execution_mode" in kwargs and kwargs["execution_mode"] is ExecutionMode.DEFAULT:
        raise InvalidArgument("WIGGLE_EXECUTION_MODE must be SERVER, LOCAL_SYNC or LOCAL_ASYNC, not DEFAULT")
    return check_config(ServerConfig(**kwargs))  # type: ignore[arg-type]


def check_config(config: ServerConfig) -> ServerConfig:
    """``config`` if every numeric setting is within BOUNDS; else InvalidArgument naming it."""
    for field, (low, high) in BOUNDS.items():
        value = getattr(config, field)
        if not low <= value <= high:
            raise InvalidArgument(f"{_named(field)} must be between {low} and {high}, got {value}")
    check_http_settings(config)
    check_event_loop(config.event_loop)
    from .._storage.base import CONTEXT_FIELD_PATTERN  # late: the settings import no store

    for field in context_fields(config):
        if not CONTEXT_FIELD_PATTERN.fullmatch(field):
            raise InvalidArgument(
                f"--context-search-fields (WIGGLE_CONTEXT_SEARCH_FIELDS) names {field!r}: each field must be "
                "a plain identifier (letters, digits, '_', at most 63 characters), comma-separated"
            )
    if config.database_url:
        check_database_url(config.database_url)
    if not config.database_url and (config.processes > 1 or config.reuse_port):
        # In-memory servers sharing a port would each hold their own workflows and instances: a
        # client's calls would land on one or the other (a start "not registered" every other time).
        flag = (
            "--processes > 1 (WIGGLE_PROCESSES)"
            if config.processes > 1
            else "--reuse-port (WIGGLE_REUSE_PORT)"
        )
        raise InvalidArgument(
            f"{flag} needs a PostgreSQL database (--database-url): in-memory servers sharing a "
            "port would each keep their own workflows and instances"
        )
    if config.database_url and config.group_commits > max(1, config.pool_size - 2):
        raise InvalidArgument(
            f"--group-commits ({config.group_commits}) must be at most --pool-size - 2 "
            f"({max(1, config.pool_size - 2)}): each group holds a connection, and two of the pool "
            "are kept for the claims and the starts"
        )
    if config.processes > 1 and config.http_port and config.http_port + config.processes - 1 > 65535:
        raise InvalidArgument(
            f"--http-port ({config.http_port}) with --processes {config.processes}: process i serves "
            f"HTTP on the port + i, past 65535 here; choose a lower port"
        )
    if config.queue_lag_clear_millis >= config.queue_lag_warn_millis:
        raise InvalidArgument(
            f"--queue-lag-clear-millis ({config.queue_lag_clear_millis}) must be below "
            f"--queue-lag-warn-millis ({config.queue_lag_warn_millis}): the lag must end below where it starts"
        )
    return config


def check_database_url(url: str) -> None:
    """A database URL libpq cannot read, or with a parameter it would refuse when it connects (a
    port that is not a number, ``connect_timeout=abc``, ``sslmode=bogus``): InvalidArgument naming
    --database-url and the parameter, before anything connects. Nothing is checked without the
    PostgreSQL driver (the server says it is missing when it opens the store)."""
    try:
        from .._storage.postgres.db import check_conninfo
    except ImportError:
        return
    check_conninfo(url)


def context_fields(config: ServerConfig) -> tuple[str, ...]:
    """The context fields the PostgreSQL store indexes for context search, in order, once each."""
    return tuple(dict.fromkeys(f.strip() for f in config.context_search_fields.split(",") if f.strip()))


_HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-]{0,99}")


def check_http_settings(config: ServerConfig) -> None:
    """The dashboard's origin and SSO-proxy settings, checked; InvalidArgument naming the one."""
    if config.http_origin:
        parts = urlsplit(config.http_origin)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise InvalidArgument(
                f"--http-origin (WIGGLE_HTTP_ORIGIN) must be a scheme and host, like "
                f"https://wiggle.example.com, got {config.http_origin!r}"
            )
    header, proxies = config.http_trusted_header, config.http_trusted_proxies
    if header and not _HEADER_NAME.fullmatch(header):
        raise InvalidArgument(f"--http-trusted-header must be an HTTP header name, got {header!r}")
    if bool(header) != bool(proxies.strip()):
        raise InvalidArgument(
            "--http-trusted-header and --http-trusted-proxies go together: the header is only "
            "believed from the proxies' addresses"
        )
    if header and not config.auth_file:
        raise InvalidArgument("--http-trusted-header names identities of the identity file: set --auth-file")
    for item in proxies.split(","):
        if item.strip():
            try:
                ipaddress.ip_network(item.strip(), strict=False)
            except ValueError:
                raise InvalidArgument(
                    f"--http-trusted-proxies: {item.strip()!r} is not an address or network (10.0.0.5, 10.0.0.0/24)"
                ) from None
