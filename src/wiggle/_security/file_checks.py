"""Warnings about the server's security files: who else may write (or read) them, and a
certificate out of its validity.

The server starts all the same: a warning names the file and the fix. Checked at start and
whenever the file is loaded again (the identity file's reload, a renewed certificate):

- the identity file (``--auth-file``), writable by its group or others: whoever can write it
  gives themselves any role;
- the TLS key (``--tls-key``), writable by its group or others, or readable by others: a key
  others can read lets them pass for the server;
- the client CA (``--tls-client-ca``), writable by its group or others: whoever can write it adds
  a CA of their own and signs client certificates with it;
- the server certificate (``--tls-cert``) expired or not valid yet: every client refuses the
  handshake (``CERTIFICATE_VERIFY_FAILED``) and takes the server for missing.

The certificate's dates are read from its DER encoding here (the standard library parses a
certificate only from a live connection), and a certificate it cannot read is left to the TLS
library, which refuses a broken one at start.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import logging
import os
import re
import stat

__all__ = ["warn_if_exposed", "warn_if_out_of_date", "certificate_validity", "exposure"]

log = logging.getLogger("wiggle.server")

_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.S)


def exposure(path: str, secret: bool) -> tuple[str, int]:
    """(who besides the owner may change ``path``: "its group", "others", "its group and others",
    and for a ``secret`` who may read it as well; its permission bits). '' when nobody, and on
    Windows (whose permissions are not mode bits) or when the file cannot be looked at."""
    if os.name == "nt":
        return "", 0
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return "", 0
    writers = [who for who, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if mode & bit]
    said = f"writable by {' and '.join(writers)}" if writers else ""
    if secret and mode & stat.S_IROTH:
        said = f"{said} and readable by others" if said else "readable by others"
    return said, mode


def warn_if_exposed(path: str, what: str, why: str, secret: bool = False, public: bool = False) -> bool:
    """Log a WARNING naming ``path`` (``what`` it is), why it matters and the fix, when others
    may write it (or, ``secret``, read it); whether it did. ``public``: a file others may read
    (a CA), whose fix only takes the write permission away."""
    said, mode = exposure(path, secret)
    if not said:
        return False
    fix = (
        f"let only its owner write it: chmod go-w {path}"
        if public
        else f"make it the server's user's alone: chmod 600 {path}"
    )
    log.warning("%s %r is %s (mode %04o): %s; %s", what, path, said, mode, why, fix)
    return True


def _element(der: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at ``at``."""
    tag, length = der[at], der[at + 1]
    at += 2
    if length & 0x80:
        size = length & 0x7F
        length = int.from_bytes(der[at : at + size], "big")
        at += size
    if at + length > len(der):
        raise ValueError("truncated")
    return tag, at, at + length


def _time(tag: int, value: bytes) -> datetime.datetime:
    text = value.decode("ascii")
    if tag == 0x17:  # UTCTime: YYMMDDHHMMSSZ, 1950-2049
        moment = datetime.datetime.strptime(text, "%y%m%d%H%M%SZ")
        if moment.year >= 2050:
            moment = moment.replace(year=moment.year - 100)
    elif tag == 0x18:  # GeneralizedTime: YYYYMMDDHHMMSSZ
        moment = datetime.datetime.strptime(text, "%Y%m%d%H%M%SZ")
    else:
        raise ValueError(f"tag {tag:#x} is no time")
    return moment.replace(tzinfo=datetime.timezone.utc)


def certificate_validity(pem: bytes) -> tuple[datetime.datetime, datetime.datetime] | None:
    """(not before, not after) of the first certificate of a PEM file; None when it cannot be read."""
    found = _PEM.search(pem)
    if found is None:
        return None
    try:
        der = base64.b64decode(b"".join(found.group(1).split()), validate=True)
        _, certificate, _ = _element(der, 0)
        _, at, _ = _element(der, certificate)  # tbsCertificate
        tag, _, end = _element(der, at)
        if tag == 0xA0:  # [0] version, present from v2 on
            at = end
        for _ in range(3):  # serialNumber, signature, issuer
            _, _, at = _element(der, at)
        _, at, _ = _element(der, at)  # validity
        tag, start, end = _element(der, at)
        not_before = _time(tag, der[start:end])
        tag, start, end = _element(der, end)
        not_after = _time(tag, der[start:end])
    except (ValueError, IndexError, binascii.Error, UnicodeDecodeError):
        return None
    return not_before, not_after


def warn_if_out_of_date(path: str, pem: bytes, now: datetime.datetime | None = None) -> bool:
    """Log a WARNING naming the certificate ``path`` when it has expired or is not valid yet
    (its first certificate, the server's own); whether it did."""
    validity = certificate_validity(pem)
    if validity is None:
        return False
    not_before, not_after = validity
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if now > not_after:
        log.warning(
            "TLS certificate %r expired at %s: every client refuses it (CERTIFICATE_VERIFY_FAILED: "
            "certificate has expired); renew it and replace the file (the server takes the new one "
            "without a restart)",
            path,
            not_after.strftime("%Y-%m-%d %H:%M:%SZ"),
        )
        return True
    if now < not_before:
        log.warning(
            "TLS certificate %r is not valid until %s: clients refuse it until then; check the "
            "clock of this machine and of the one that issued it",
            path,
            not_before.strftime("%Y-%m-%d %H:%M:%SZ"),
        )
        return True
    return False
