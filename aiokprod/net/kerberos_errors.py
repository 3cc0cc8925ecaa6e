"""What a GSS library error means in the user's terms: the typed error and what to fix.

MIT krb5 reports Kerberos failures as GSS errors whose *minor* code is a krb5 error code
(``krb5.h``; the same numbers on every platform MIT runs on). :func:`explain` maps the codes
users meet to the typed errors of :mod:`aiokprod.net.security` with messages that name the fix:
``kinit`` or a keytab for missing credentials, the principal asked for and where its host came
from for an unknown service principal, the clocks, a stale keytab. The library's own words are
kept in ``gss_message`` and at the end of the message.

Pure functions over the exception's ``maj_code``, ``min_code`` and ``gen_message()``: no
import of ``gssapi`` here, so the mapping is tested without the library or a KDC.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Protocol

from aiokprod.errors import KafkaError
from aiokprod.net.security import (
    KerberosClockSkewError,
    KerberosCredentialsError,
    KerberosError,
    KerberosKdcUnreachableError,
    KerberosKeytabError,
    KerberosPrincipalNotFoundError,
)

if TYPE_CHECKING:
    from aiokprod.net.kerberos import Target

# krb5 error codes (krb5.h), as the signed 32-bit numbers MIT uses.
C_PRINCIPAL_UNKNOWN = -1765328378
S_PRINCIPAL_UNKNOWN = -1765328377
CLIENT_REVOKED = -1765328366
KEY_EXPIRED = -1765328361
PREAUTH_FAILED = -1765328360
BAD_INTEGRITY = -1765328353
TKT_EXPIRED = -1765328352
SKEW = -1765328347
CC_NOTFOUND = -1765328243
KDCREP_SKEW = -1765328236
REALM_UNKNOWN = -1765328230
KDC_UNREACH = -1765328228
KT_NOTFOUND = -1765328203
FCC_NOFILE = -1765328189
GENERIC_PREAUTH_FAILED = -1765328174
KT_KVNONOTFOUND = -1765328154
# GSS major status codes (RFC 2744): routine errors live in bits 16-23.
GSS_S_NO_CRED = 7 << 16
GSS_S_CREDENTIALS_EXPIRED = 11 << 16

_NO_CREDENTIALS = {CC_NOTFOUND, FCC_NOFILE}
_CLIENT_REFUSED = {C_PRINCIPAL_UNKNOWN, CLIENT_REVOKED, KEY_EXPIRED}
_BAD_KEY = {PREAUTH_FAILED, BAD_INTEGRITY, GENERIC_PREAUTH_FAILED}
_NO_KEY = {KT_NOTFOUND, KT_KVNONOTFOUND}
_SKEWS = {SKEW, KDCREP_SKEW}
_SERVER_NOT_FOUND = re.compile(r"Server (\S+) not found")
_MINOR = re.compile(r"Minor \(\d+\): ")
_MAJOR = re.compile(r"^Major \(\d+\): (.*?)(?:, Minor \(\d+\): .*)?$", re.DOTALL)


class GssFailure(Protocol):
    """The part of ``gssapi.exceptions.GSSError`` read here."""

    maj_code: int
    min_code: int

    def gen_message(self) -> str:
        """The library's message for both codes."""
        ...


def signed32(code: int) -> int:
    """A status code as the signed 32-bit number ``krb5.h`` defines (gssapi gives unsigned)."""
    code &= 0xFFFFFFFF
    return code - (1 << 32) if code >= 1 << 31 else code


def kerberos_reason(exc: GssFailure) -> str:
    """The library's words for ``exc``: the minor (Kerberos) message when there is one."""
    try:
        message = exc.gen_message()
    except Exception:  # noqa: BLE001 - a message is all we want; the codes remain
        return f"GSS major {exc.maj_code:#x}, minor {exc.min_code}"
    parts = _MINOR.split(message)
    minor = parts[-1].strip() if len(parts) > 1 else ""
    if minor and minor not in ("Success", "Unknown error"):
        return minor
    major = _MAJOR.match(message.strip())
    return major.group(1).strip() if major else message.strip()


def explain(
    exc: GssFailure, *, target: Target, client: str | None, keytab: str | None
) -> KafkaError:
    """The typed error for a GSS failure while authenticating to ``target``.

    Args:
        exc: the GSS library's error.
        target: the broker and the service principal asked for.
        client: the client principal, if known.
        keytab: ``sasl_kerberos_keytab``, if set.
    """
    reason = kerberos_reason(exc)
    code = signed32(exc.min_code)
    major = exc.maj_code & 0x00FF0000
    who = client or "this client"
    keytab_name = keytab or os.environ.get("KRB5_CLIENT_KTNAME")
    fields = {
        "username": client,
        "service_principal": target.principal,
        "host": target.host,
        "gss_message": reason,
    }
    if code == S_PRINCIPAL_UNKNOWN:
        found = _SERVER_NOT_FOUND.search(reason)
        principal = found.group(1) if found else target.principal
        fields["service_principal"] = principal
        service = principal.split("/", 1)[0]
        return KerberosPrincipalNotFoundError(
            f"the KDC has no service principal {principal} (asked for to authenticate to "
            f"{target.node}): its host '{target.host}' is {target.origin}, used as written "
            "(aiokprod does no DNS lookup). Give each broker the principal of the name it "
            "advertises, or set sasl_kerberos_domain_name to the host part of the brokers' "
            f"principal (sasl_kerberos_service_name for the '{service}' part) [{reason}]",
            **fields,
        )
    if code in _SKEWS:
        return KerberosClockSkewError(
            "this machine's clock and the KDC's differ by more than the realm allows (5 "
            f"minutes unless configured): synchronise the clocks (NTP) [{reason}]",
            **fields,
        )
    if code in _BAD_KEY and keytab_name:
        return KerberosKeytabError(
            f"the key of {who} in keytab {keytab_name} does not match the KDC's: the "
            "principal's key changed after the keytab was extracted (every ktadd without "
            f"-norandkey makes a new one); extract the keytab again [{reason}]",
            **fields,
        )
    if keytab_name and (code in _NO_KEY or (code == FCC_NOFILE and keytab)):
        return KerberosKeytabError(
            f"keytab {keytab_name} holds no key for {who}: compare sasl_kerberos_principal "
            f"with `klist -k {keytab_name}` [{reason}]",
            **fields,
        )
    if code == KDC_UNREACH:
        return KerberosKdcUnreachableError(
            f"no KDC answered for the ticket to authenticate to {target.node} (the KDCs of "
            f"{_krb5_config()}) [{reason}]"
        )
    if code == REALM_UNKNOWN:
        return KerberosError(
            f"krb5.conf ({_krb5_config()}) names no KDC for the realm [{reason}]", **fields
        )
    if code in _CLIENT_REFUSED:
        return KerberosCredentialsError(
            f"the KDC refuses the client principal {who} (check sasl_kerberos_principal or "
            f"the keytab's principal) [{reason}]",
            **fields,
        )
    if code == TKT_EXPIRED or major == GSS_S_CREDENTIALS_EXPIRED:
        cache = os.environ.get("KRB5CCNAME") or "the default ticket cache"
        holder = f"of {client}" if client else f"in {cache}"
        return KerberosCredentialsError(
            f"the Kerberos ticket {holder} has expired: run kinit again (or a renewer such as "
            "k5start), or give a keytab (sasl_kerberos_keytab), from which tickets are renewed "
            f"by themselves [{reason}]",
            **fields,
        )
    if code in _NO_CREDENTIALS or major == GSS_S_NO_CRED:
        return KerberosCredentialsError(
            f"no Kerberos credentials for {who} to authenticate to {target.node}: a developer "
            "runs `kinit <principal>` first (the ticket cache: KRB5CCNAME); a service gives a "
            f"keytab (sasl_kerberos_keytab, or KRB5_CLIENT_KTNAME) [{reason}]",
            **fields,
        )
    return KerberosError(
        f"Kerberos authentication of {who} to {target.node} ({target.principal}) failed [{reason}]",
        **fields,
    )


def _krb5_config() -> str:
    return os.environ.get("KRB5_CONFIG") or "/etc/krb5.conf"
