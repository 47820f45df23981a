"""The identity file and the client credentials: bad settings are refused with the problem named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wiggle._security.credentials import Credentials
from wiggle._security.tokens import IdentityTable, Role, hash_token, new_token

from .certs import Authority

GOOD = {"name": "w", "roles": ["worker"], "queues": ["q"], "token_sha256": hash_token("t")}


@pytest.mark.parametrize(
    "doc, fragment",
    [
        ([], '"identities"'),
        ({"identities": [5]}, "identity #1 must be an object"),
        ({"identities": [{**GOOD, "name": "bad name"}]}, "name 'bad name'"),
        ({"identities": [{**GOOD, "roles": ["root"]}]}, "must be among admin"),
        ({"identities": [{**GOOD, "roles": []}]}, "non-empty list"),
        ({"identities": [{**GOOD, "queues": []}]}, "lists the queues it may serve"),
        ({"identities": [{**GOOD, "token_sha256": "t"}]}, "64 lowercase hex"),
        ({"identities": [{"name": "x", "roles": ["viewer"]}]}, "token_sha256, cert_cn, or both"),
        ({"identities": [GOOD, GOOD]}, "names 'w' twice"),
        ({"identities": [{**GOOD, "token": "t"}]}, "unknown keys ['token']"),
    ],
)
def test_a_bad_identity_file_is_refused_naming_the_entry(tmp_path: Path, doc: object, fragment: str) -> None:
    path = tmp_path / "ids.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(
        ValueError, match=fragment.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
    ) as refused:
        IdentityTable(str(path))
    assert f"identity file {str(path)!r}" in str(refused.value)  # every refusal names the file


def test_an_identity_file_that_is_not_text_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ids.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ValueError) as refused:
        IdentityTable(str(path))
    assert str(refused.value) == (
        f"identity file {str(path)!r} is not UTF-8 text (byte 0): it must be a JSON document"
    )


def test_lookups_and_a_broken_reload_keeps_the_identities(tmp_path: Path) -> None:
    path = tmp_path / "ids.json"
    path.write_text(
        json.dumps({"identities": [GOOD, {"name": "c", "roles": ["client"], "cert_cn": "c.example"}]})
    )
    table = IdentityTable(str(path))
    found = table.by_token("t")
    assert (
        found is not None
        and found.roles == {Role.WORKER}
        and found.may_serve("q")
        and not found.may_serve("r")
    )
    assert table.by_token("other") is None
    assert table.by_certificate("c.example") is not None and table.by_certificate("x") is None
    path.write_text("{not json")
    assert table.reload_if_changed(force=True) is False  # logged, the old identities stay
    assert table.by_token("t") is not None
    assert new_token() != new_token() and len(new_token()) > 40


def test_credentials_settings_and_environment(tmp_path: Path) -> None:
    env = {"WIGGLE_TLS_CA": "/ca.pem", "WIGGLE_TOKEN": "abc"}
    creds = Credentials.from_env(env)
    assert creds.ca_file == "/ca.pem" and creds.bearer() == "abc" and creds.tls
    assert Credentials.from_env(env, ca_file="/other.pem").ca_file == "/other.pem"
    with pytest.raises(ValueError, match="only sent over TLS"):
        Credentials(token="abc").check()
    with pytest.raises(ValueError, match="both cert_file and key_file"):
        Credentials(ca_file="/ca.pem", cert_file="/c.pem").check()
    with pytest.raises(ValueError, match="cannot read the CA file"):
        Credentials(ca_file=str(tmp_path / "missing.pem")).channel_credentials()
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    assert Credentials(ca_file="/ca.pem", token_file=str(token_file)).bearer() == "from-file"


def test_an_empty_token_file_is_refused_when_the_client_is_made(tmp_path: Path) -> None:
    # it sent no token, and the server answered "no credential: send a bearer token (WIGGLE_TOKEN)"
    from wiggle import AsyncClient, Client

    ca, token_file = Authority(tmp_path).ca_file, tmp_path / "token"
    token_file.write_text(" \n")
    credentials = Credentials(ca_file=str(ca), token_file=str(token_file))
    for make in (AsyncClient, Client):
        with pytest.raises(ValueError) as refused:
            make("127.0.0.1:1", credentials=credentials)
        assert str(refused.value) == (
            f"the token file {str(token_file)!r} (token_file, WIGGLE_TOKEN_FILE) is empty: write the "
            "token in it (`wiggle token` prints one), or unset it"
        )


@pytest.mark.parametrize("given", ["wgl_token", {"token": "wgl_token"}])
def test_credentials_of_another_type_are_named(given: object) -> None:
    """A token or a dict of Credentials' fields, given as ``credentials``, met "'str' object has
    no attribute 'channel_credentials'" in a client, and only at its start in a worker."""
    from wiggle import AsyncClient, Client, Worker, Workflow

    flow = Workflow.define("credentials-typed").step(lambda ctx: ctx, name="noop").build()
    message = r"credentials must be a wiggle.Credentials, got (str|dict) \(e.g. Credentials\(ca_file=..., token=...\)\)"
    for make in (
        lambda: Client("127.0.0.1:1", credentials=given),  # type: ignore[arg-type]
        lambda: AsyncClient("127.0.0.1:1", credentials=given),  # type: ignore[arg-type]
        lambda: Worker("127.0.0.1:1", [flow], credentials=given),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match=message):
            make()
