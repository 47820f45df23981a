"""No accidental exposure: a non-loopback bind needs TLS and authentication, or --insecure."""

from __future__ import annotations

import pytest

from wiggle import cli
from wiggle._security.tokens import Role
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig, from_mapping
from wiggle._server.exposure import build_security, is_loopback
from wiggle.errors import FailedPrecondition

from .conftest import Pki, write_identities


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.1.2.3")
    assert not is_loopback("db.example")


def test_non_loopback_bind_without_tls_and_auth_is_refused_naming_the_flags(pki: Pki) -> None:
    with pytest.raises(FailedPrecondition) as refused:
        build_security(ServerConfig(host="0.0.0.0"))
    message = str(refused.value)
    for flag in ("--tls-cert", "--tls-key", "--auth-file", "--tls-client-ca", "--insecure"):
        assert flag in message
    # TLS alone is not enough: nobody would be authenticated
    with pytest.raises(FailedPrecondition, match="authentication"):
        build_security(
            ServerConfig(host="0.0.0.0", tls_cert=str(pki.server_cert), tls_key=str(pki.server_key))
        )
    ok = build_security(
        ServerConfig(
            host="0.0.0.0",
            tls_cert=str(pki.server_cert),
            tls_key=str(pki.server_key),
            auth_file=str(pki.auth_file),
        )
    )
    assert ok.authenticator is not None
    assert build_security(ServerConfig(host="0.0.0.0", insecure=True)).authenticator is None


def test_tokens_need_tls(pki: Pki) -> None:
    with pytest.raises(FailedPrecondition, match="--auth-file needs TLS"):
        build_security(ServerConfig(auth_file=str(pki.auth_file)))


def test_an_identity_without_a_credential_is_only_taken_behind_an_sso_proxy(pki: Pki) -> None:
    write_identities(pki.auth_file, [{"name": "alice", "roles": ["viewer"]}])
    tls = {"tls_cert": str(pki.server_cert), "tls_key": str(pki.server_key)}
    with pytest.raises(FailedPrecondition) as refused:
        build_security(ServerConfig(auth_file=str(pki.auth_file), **tls))
    assert str(refused.value) == (
        f"identity file {str(pki.auth_file)!r}: identity 'alice': give token_sha256, cert_cn, or both "
        "(an entry with neither is a person an SSO proxy signs in, taken only with --http-trusted-header)"
    )
    proxied = build_security(
        ServerConfig(
            auth_file=str(pki.auth_file),
            http_trusted_header="X-Forwarded-User",
            http_trusted_proxies="127.0.0.2",
            **tls,
        )
    )
    assert proxied.identities is not None
    alice = proxied.identities.by_name("alice")
    assert alice is not None and alice.roles == {Role.VIEWER}


async def test_insecure_bind_on_every_interface_serves() -> None:
    server = WiggleServer(ServerConfig(host="0.0.0.0", port=0, insecure=True))
    await server.start()
    try:
        assert server.port > 0
    finally:
        await server.stop(grace=0.5)


def test_cli_refuses_and_exits_with_the_message(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["server", "--host", "0.0.0.0", "--port", "0"])
    assert code != 0
    assert "--insecure" in capsys.readouterr().err


def test_switches_from_env_and_flags() -> None:
    assert from_mapping({}, env={"WIGGLE_INSECURE": "1"}).insecure is True
    assert from_mapping({"insecure": True}, env={}).insecure is True
    assert from_mapping({}, env={"WIGGLE_OPEN_METRICS": "no"}).open_metrics is False
    with pytest.raises(ValueError, match=r"--insecure \(WIGGLE_INSECURE\) must be true or false"):
        from_mapping({}, env={"WIGGLE_INSECURE": "maybe"})
    args = cli.build_parser().parse_args(["server", "--insecure", "--open-metrics"])
    assert args.insecure is True and args.open_metrics is True
