"""The lab CA and the emulated iDRACs' TLS certificates (ECDSA P-256: fast enough for 500 BMCs)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bootstrap.fsutil import atomic_write_bytes

CA_CERT_NAME = "lab-ca.pem"
CA_KEY_NAME = "lab-ca.key"


@dataclass(frozen=True)
class LeafFiles:
    """A BMC's certificate chain and key on disk, and the leaf's SHA-256 fingerprint."""

    cert_file: Path
    key_file: Path
    fingerprint: str


def fingerprint_of(cert: x509.Certificate) -> str:
    """SHA-256 of the DER certificate as ``AA:BB:...`` upper-case hex (the inventory's pin format)."""
    return ":".join(f"{b:02X}" for b in cert.fingerprint(hashes.SHA256()))


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class LabCA:
    """A self-signed CA kept in ``directory`` (created on first use, reused afterwards)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.cert_file = self.directory / CA_CERT_NAME
        self.key_file = self.directory / CA_KEY_NAME
        if self.cert_file.exists() and self.key_file.exists():
            self.cert = x509.load_pem_x509_certificate(self.cert_file.read_bytes())
            key = serialization.load_pem_private_key(self.key_file.read_bytes(), password=None)
            assert isinstance(key, ec.EllipticCurvePrivateKey)
            self.key = key
        else:
            self.key, self.cert = self._create()
            atomic_write_bytes(self.key_file, _key_pem(self.key), mode=0o600)
            atomic_write_bytes(self.cert_file, self.cert.public_bytes(serialization.Encoding.PEM))

    @staticmethod
    def _create() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rackctl lab CA")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - dt.timedelta(minutes=5))
            .not_valid_after(_now() + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return key, cert

    def issue(self, name: str, address: str, directory: Path) -> LeafFiles:
        """Issue a server certificate for ``name`` with an IP SAN for ``address``; write chain + key."""
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = [x509.DNSName(name), x509.DNSName("localhost")]
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError:
            sans.append(x509.DNSName(address))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - dt.timedelta(minutes=5))
            .not_valid_after(_now() + dt.timedelta(days=90))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        cert_file = Path(directory) / f"{safe}.pem"
        key_file = Path(directory) / f"{safe}.key"
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.cert.public_bytes(serialization.Encoding.PEM)
        atomic_write_bytes(cert_file, chain)
        atomic_write_bytes(key_file, _key_pem(key), mode=0o600)
        return LeafFiles(cert_file=cert_file, key_file=key_file, fingerprint=fingerprint_of(cert))
