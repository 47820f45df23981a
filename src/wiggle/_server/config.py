"""Server configuration: WIGGLE_* environment variables, the same names as CLI flags."""

from __future__ import annotations

import os
from collections.abc import Mapping

import msgspec

from .._model import ExecutionMode
from ..errors import InvalidArgument

__all__ = ["ServerConfig", "SETTINGS", "BOUNDS", "check_config"]


class ServerConfig(msgspec.Struct, kw_only=True):
    """Every server setting; ``from_mapping`` reads them from WIGGLE_* variables and CLI flags."""

    host: str = "127.0.0.1"
    port: int = 7233
    upstream_port: int = 0  # > 0: also serve both protocols here (upstream Wiggle's clients use 8080)
    database_url: str = ""  # empty: the in-memory store
    database_schema: str = "wiggle"
    execution_mode: ExecutionMode = ExecutionMode.SERVER  # what a definition's DEFAULT resolves to
    lease_millis: int = 30_000
    max_lease_millis: int = 600_000  # the longest lease a client may ask for (upstream protocol)
    max_local_steps: int = 1000
    max_payload_bytes: int = 1 << 20
    max_instance_steps: int = 100_000
    retention_seconds: int = 3 * 24 * 3600
    metrics_port: int = 0  # > 0: serve Prometheus metrics on http://host:metrics_port/metrics
    pool_size: int = 10
    processes: int = 1
    # securing a deployment (docs/semantics.md#security)
    tls_cert: str = ""  # PEM server certificate: TLS on the gRPC and HTTP ports
    tls_key: str = ""
    tls_client_ca: str = ""  # PEM CA bundle: client certificates required (mTLS)
    auth_file: str = ""  # JSON identity file: tokens and certificate names -> roles
    insecure: bool = False  # allow a non-loopback bind without TLS and authentication
    open_metrics: bool = False  # /metrics and /healthz answer without a credential
    reload_seconds: float = 10.0  # how often certificate and identity files are checked for changes
    # bounds
    max_live_instances: int = 100_000  # memory store: instances held at once; 0: no bound
    purge_interval_seconds: float = 60.0  # how often finished instances past retention are purged
    queue_lag_warn_millis: int = 30_000  # a queue whose oldest ready step waited this long lags
    queue_lag_clear_millis: int = 0  # ... until that age is below this (0: half the warning)
    queue_lag_interval_millis: int = 5_000  # how often the queue-lag monitor looks


#: (field, env var, help) for every setting, in the order the README documents them.
SETTINGS: list[tuple[str, str, str]] = [
    ("host", "WIGGLE_HOST", "address the gRPC server binds (default 127.0.0.1)"),
    ("port", "WIGGLE_PORT", "gRPC port (default 7233; 0 picks a free port)"),
    (
        "upstream_port",
        "WIGGLE_UPSTREAM_PORT",
        "a second gRPC port, e.g. 8080 for upstream Wiggle's clients (default 0: none)",
    ),
    ("database_url", "WIGGLE_DATABASE_URL", "postgresql:// URL; unset: the in-memory store"),
    (
        "database_schema",
        "WIGGLE_DATABASE_SCHEMA",
        "PostgreSQL schema holding Wiggle's tables (default wiggle)",
    ),
    (
        "execution_mode",
        "WIGGLE_EXECUTION_MODE",
        "what DEFAULT resolves to: SERVER, LOCAL_SYNC or LOCAL_ASYNC",
    ),
    (
        "lease_millis",
        "WIGGLE_LEASE_MILLIS",
        "how long a claimed step is leased before it is redelivered (30000)",
    ),
    (
        "max_lease_millis",
        "WIGGLE_MAX_LEASE_MILLIS",
        "the longest lease a claim or heartbeat may ask for; shorter asks are raised to 1000 (600000)",
    ),
    ("max_local_steps", "WIGGLE_LOCAL_MAX_STEPS", "server cap on one local run's length; 0: none (1000)"),
    ("max_payload_bytes", "WIGGLE_MAX_PAYLOAD_BYTES", "limit on a context, step result or payload (1 MiB)"),
    (
        "max_instance_steps",
        "WIGGLE_MAX_INSTANCE_STEPS",
        "runaway guard: steps one instance may take (100000)",
    ),
    ("retention_seconds", "WIGGLE_RETENTION", "seconds finished instances are kept before purge (259200)"),
    ("metrics_port", "WIGGLE_METRICS_PORT", "port of the Prometheus /metrics endpoint; 0: off"),
    ("pool_size", "WIGGLE_POOL_SIZE", "PostgreSQL connections per server process (10)"),
    ("processes", "WIGGLE_PROCESSES", "server processes sharing the port (PostgreSQL only) (1)"),
    ("tls_cert", "WIGGLE_TLS_CERT", "PEM server certificate: TLS on the gRPC and HTTP ports"),
    ("tls_key", "WIGGLE_TLS_KEY", "PEM private key of --tls-cert"),
    (
        "tls_client_ca",
        "WIGGLE_TLS_CLIENT_CA",
        "PEM CA bundle; client certificates signed by it required (mTLS)",
    ),
    ("auth_file", "WIGGLE_AUTH_FILE", "JSON identity file: hashed tokens and certificate names -> roles"),
    ("insecure", "WIGGLE_INSECURE", "allow a non-loopback bind without TLS and authentication"),
    ("open_metrics", "WIGGLE_OPEN_METRICS", "serve /metrics and /healthz without a credential"),
    ("reload_seconds", "WIGGLE_RELOAD_SECONDS", "seconds between checks of the TLS and identity files (10)"),
    (
        "max_live_instances",
        "WIGGLE_MAX_LIVE_INSTANCES",
        "memory store: instances held at once, finished ones evicted first; 0: no bound (100000)",
    ),
    (
        "purge_interval_seconds",
        "WIGGLE_PURGE_INTERVAL",
        "seconds between purges of instances finished longer than the retention (60)",
    ),
    (
        "queue_lag_warn_millis",
        "WIGGLE_QUEUE_LAG_WARN_MILLIS",
        "warn when a queue's oldest ready step waited this long (30000)",
    ),
    (
        "queue_lag_clear_millis",
        "WIGGLE_QUEUE_LAG_CLEAR_MILLIS",
        "the lag ends below this age; 0: half the warning threshold (hysteresis)",
    ),
    ("queue_lag_interval_millis", "WIGGLE_QUEUE_LAG_INTERVAL_MILLIS", "how often queues are checked (5000)"),
]

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
        raise InvalidArgument(f"{field} must be true or false, got {raw!r}")
    if isinstance(default, float):
        try:
            return float(raw)
        except ValueError:
            raise InvalidArgument(f"{field} must be a number, got {raw!r}") from None
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise InvalidArgument(f"{field} must be an integer, got {raw!r}") from None
    return raw


def from_mapping(values: Mapping[str, object], env: Mapping[str, str] | None = None) -> ServerConfig:
    """Settings from ``env`` (default os.environ), overridden by non-None ``values`` (CLI flags)."""
    env = os.environ if env is None else env
    kwargs: dict[str, object] = {}
    for field, var, _ in SETTINGS:
        if var in env and env[var] != "":
            kwargs[field] = _convert(field, env[var])
        value = values.get(field)
        if value is not None:
            kwargs[field] = _convert(field, str(value)) if isinstance(value, str) else value
    if "execution_mode" in kwargs and kwargs["execution_mode"] is ExecutionMode.DEFAULT:
        raise InvalidArgument("WIGGLE_EXECUTION_MODE must be SERVER, LOCAL_SYNC or LOCAL_ASYNC, not DEFAULT")
    return check_config(ServerConfig(**kwargs))  # type: ignore[arg-type]


#: The smallest (and largest) value each numeric setting accepts (docs: README "Configuration").
BOUNDS: dict[str, tuple[int, int]] = {
    "port": (0, 65535),
    "metrics_port": (0, 65535),
    "upstream_port": (0, 65535),
    "lease_millis": (100, 24 * 3600 * 1000),
    "max_lease_millis": (1000, 24 * 3600 * 1000),
    "max_local_steps": (0, 1 << 31),
    "max_payload_bytes": (1024, 1 << 30),
    "max_instance_steps": (1, 1 << 62),
    "retention_seconds": (0, 100 * 365 * 24 * 3600),
    "pool_size": (1, 1000),
    "processes": (1, 256),
    "queue_lag_warn_millis": (1, 7 * 24 * 3600 * 1000),
    "queue_lag_clear_millis": (0, 7 * 24 * 3600 * 1000),
    "queue_lag_interval_millis": (10, 3600 * 1000),
}


def check_config(config: ServerConfig) -> ServerConfig:
    """``config`` if every numeric setting is within BOUNDS; else InvalidArgument naming it."""
    names = {field: var for field, var, _ in SETTINGS}
    for field, (low, high) in BOUNDS.items():
        value = getattr(config, field)
        if not low <= value <= high:
            flag = "--" + field.replace("_", "-")
            raise InvalidArgument(f"{flag} ({names[field]}) must be between {low} and {high}, got {value}")
    if config.queue_lag_clear_millis >= config.queue_lag_warn_millis:
        raise InvalidArgument(
            f"--queue-lag-clear-millis ({config.queue_lag_clear_millis}) must be below "
            f"--queue-lag-warn-millis ({config.queue_lag_warn_millis}): the lag must end below where it starts"
        )
    return config
