"""Self-signed TLS certificates for loopback servers in tests and benchmarks."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Certificate:
    cert_pem: bytes
    key_pem: bytes

    def server_context(self, directory: Path) -> ssl.SSLContext:
        """A server context with this certificate (written into `directory`)."""
        (directory / "cert.pem").write_bytes(self.cert_pem)
        (directory / "key.pem").write_bytes(self.key_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts only this certificate."""
        return ssl.create_default_context(cadata=self.cert_pem.decode())


def self_signed(*names: str) -> Certificate:
    """A CA-flagged certificate (so it can be its own trust anchor) for `names`: host names,
    or IP addresses written as such (`127.0.0.1`)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    alternatives: list[x509.GeneralName] = []
    for name in names:
        try:
            alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternatives.append(x509.DNSName(name))
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return Certificate(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
