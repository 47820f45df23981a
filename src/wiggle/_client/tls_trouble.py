"""What a failed TLS handshake means, in words a person can act on.

gRPC reports a handshake it could not finish (the server's certificate not signed by the CA the
client trusts, expired, naming another host; a server without TLS; a client certificate missing
under mTLS) as UNAVAILABLE, like a server that is not there at all; only its details tell, in
OpenSSL's words. ``tls_trouble`` reads them, so that the client's error says it is a TLS problem
and which setting or file to look at, rather than asking whether a server runs there
(docs/security.md#when-a-client-cannot-connect).
"""

from __future__ import annotations

__all__ = ["tls_trouble", "telling", "closed_unanswered"]

#: text of gRPC's and OpenSSL's handshake failures (lower case)
_MARKERS = (
    "handshake failed",
    "ssl_error",
    "certificate_verify_failed",
    "hostname verification",
    "tsi_",
    "wrong_version_number",
    "certificate_required",
    "alert handshake failure",
    "security handshaker",  # the client's own certificate and key refused by gRPC (not a pair)
)

#: a server that took the TCP connection and closed it unanswered: gRPC's words, lower case
_CLOSED = "socket closed"

#: (what the details say, lower case; what to check), the first that matches wins
_ADVICE = (
    (
        ("certificate has expired", "certificate_expired"),
        "the server's certificate has expired (or is not valid yet): renew it (the server logs a "
        "warning naming the file at start), and check this machine's clock",
    ),
    (
        ("hostname verification", "no match found for server name", "peer name"),
        "the server's certificate does not name the host you connect to: connect by a name it "
        "lists, or set WIGGLE_TLS_SERVER_NAME (--tls-server-name) to one",
    ),
    (
        ("certificate_verify_failed", "unable to get local issuer", "self signed", "self-signed"),
        "the server's certificate is not signed by the CA in WIGGLE_TLS_CA (--tls-ca): give the "
        "CA that signed it, and check that the certificate has not expired",
    ),
    (
        ("wrong_version_number", "http_request", "packet_length_too_long"),
        "the server there does not speak TLS: leave WIGGLE_TLS_CA unset for a plaintext server, "
        "or start the server with --tls-cert and --tls-key",
    ),
    (
        ("certificate_required", "handshake failure", "handshake_failure"),
        "the server may require a client certificate (mTLS): set WIGGLE_TLS_CLIENT_CERT and "
        "WIGGLE_TLS_CLIENT_KEY to one signed by its --tls-client-ca; else check WIGGLE_TLS_CA",
    ),
)

_GENERAL = (
    "check that WIGGLE_TLS_CA (--tls-ca) is the CA that signed the server's certificate, that the "
    "certificate has not expired and names the host you connect to, and, under mTLS, the client "
    "certificate"
)


def tls_trouble(details: str) -> str:
    """'' when ``details`` (a gRPC error's) do not tell of a failed TLS handshake; else what it
    was and what to check, as a clause: "a TLS problem, not a missing server: ..."."""
    text = details.lower()
    if not any(marker in text for marker in _MARKERS):
        return ""
    advice = next((says for signs, says in _ADVICE if any(s in text for s in signs)), _GENERAL)
    return f"a TLS problem, not a missing server: {advice}"


def closed_unanswered(details: str, tls: bool, client_cert: bool) -> str:
    """'' unless ``details`` say a server took the connection and closed it before answering
    ("Socket closed"), which is how a TLS server meets a plaintext client, and an mTLS server a
    client without a certificate it takes (OpenSSL's words stay on the server's side); else that
    clause, for a client using TLS (``tls``) with a certificate of its own (``client_cert``) or not."""
    if _CLOSED not in details.lower() or tls_trouble(details):
        return ""
    if not tls:
        why = "the server there may speak TLS: set WIGGLE_TLS_CA (--tls-ca) to the CA of its certificate"
    elif not client_cert:
        why = (
            "the server may require a client certificate (mTLS): set WIGGLE_TLS_CLIENT_CERT and "
            "WIGGLE_TLS_CLIENT_KEY (--client-cert, --client-key) to one signed by its --tls-client-ca"
        )
    else:
        why = (
            "the server may refuse this client certificate (WIGGLE_TLS_CLIENT_CERT, --client-cert): "
            "check that it is signed by the server's --tls-client-ca and has not expired"
        )
    return (
        "a TLS problem, likely, not a missing server: a server took the connection and closed it "
        f"unanswered; {why}"
    )


def telling(details: str) -> int:
    """How much ``details`` tell of why a server was not reached: 2 a failed TLS handshake, 1 a
    connection closed unanswered, 0 else (refused: nothing listens). A target that resolves to
    several addresses (``localhost``: ::1 and 127.0.0.1) fails on each, and gRPC's details name
    the last one tried only; the client keeps the most telling of its tries (aio.py)."""
    if tls_trouble(details):
        return 2
    return 1 if _CLOSED in details.lower() else 0
