"""A throw-away test PKI for the local Kafka's TLS listeners (needs the ``cryptography`` package).

:func:`make_test_pki` writes, into one folder:

* ``ca.pem`` - a test CA certificate (what clients trust);
* ``server.pem`` - the broker's certificate chain plus its PKCS#8 private key in one file, as
  Kafka's ``ssl.keystore.type=PEM`` wants it; the certificate names ``IP:127.0.0.1`` and
  ``DNS:localhost`` so host name verification passes on loopback;
* ``client.pem`` / ``client.key`` - a client certificate for mutual TLS, its key encrypted
  with :data:`CLIENT_KEY_PASSWORD`;
* ``other-ca.pem`` - an unrelated CA, for "untrusted certificate" tests.

EC P-256 keys: generated in milliseconds, accepted by Java 17 and OpenSSL alike.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from aiokprod.testing.errors import LocalKafkaError

#: Passphrase of the test client's private key (a test value, not a secret).
CLIENT_KEY_PASSWORD = "client-key-pass-5d1e"
_VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class TestPki:
    """Paths of the files :func:`make_test_pki` wrote.

    Attributes:
        ca_file: the test CA certificate (PEM).
        server_keystore: broker certificate chain + PKCS#8 key (PEM).
        client_cert: client certificate (PEM), signed by the test CA.
        client_key: client private key (encrypted PKCS#8 PEM, password
            :data:`CLIENT_KEY_PASSWORD`).
        client_key_password: the client key's passphrase.
        other_ca_file: a CA that signed nothing the broker uses.
    """

    __test__ = False  # not a pytest test class, despite the name

    ca_file: Path
    server_keystore: Path
    client_cert: Path
    client_key: Path
    client_key_password: str
    other_ca_file: Path


def make_test_pki(folder: Path) -> TestPki:
    """Generate the CA, server and client certificates into ``folder`` (created if missing).

    Raises:
        LocalKafkaError: the ``cryptography`` package is not installed.
    """
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:  # pragma: no cover - a test dependency
        raise LocalKafkaError(
            "TLS listeners need the 'cryptography' package (pip install aiokprod[test])"
        ) from exc

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)

    def name(common_name: str) -> x509.Name:
        return x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "aiokprod tests"),
                x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            ]
        )

    def new_key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP256R1())

    def make_ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = new_key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(common_name))
            .issuer_name(name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        return cert, key

    def make_leaf(
        common_name: str,
        ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
        *,
        server: bool,
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = new_key()
        ca_cert, ca_key = ca
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(common_name))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.DNSName("localhost"),
                    ]
                ),
                critical=False,
            )
        return builder.sign(ca_key, hashes.SHA256()), key

    def cert_pem(cert: x509.Certificate) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(password.encode())
            if password
            else serialization.NoEncryption()
        )
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )

    ca = make_ca("aiokprod test CA")
    other_ca = make_ca("aiokprod untrusted CA")
    server_cert, server_key = make_leaf("localhost", ca, server=True)
    client_cert, client_key = make_leaf("aiokprod-client", ca, server=False)

    pki = TestPki(
        ca_file=folder / "ca.pem",
        server_keystore=folder / "server.pem",
        client_cert=folder / "client.pem",
        client_key=folder / "client.key",
        client_key_password=CLIENT_KEY_PASSWORD,
        other_ca_file=folder / "other-ca.pem",
    )
    pki.ca_file.write_bytes(cert_pem(ca[0]))
    pki.other_ca_file.write_bytes(cert_pem(other_ca[0]))
    # Kafka's PEM keystore: the key (PKCS#8) and the chain, leaf first, in one file.
    pki.server_keystore.write_bytes(key_pem(server_key) + cert_pem(server_cert) + cert_pem(ca[0]))
    pki.client_cert.write_bytes(cert_pem(client_cert))
    pki.client_key.write_bytes(key_pem(client_key, CLIENT_KEY_PASSWORD))
    for path in (pki.server_keystore, pki.client_key):
        path.chmod(0o600)
    return pki
