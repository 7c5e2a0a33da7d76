"""Each TLS failure says why and what to fix: real certificates (made here with ``cryptography``) served by
a real local TLS server, reached by the real engine (:class:`BmcConnection`)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import SecretStr

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection, BmcTarget, ConnectionPolicy

PASSWORD = "pw-tls-secret-7731"
POLICY = ConnectionPolicy(connect_timeout=2, read_timeout=3, retries=1, backoff=0.05, request_deadline_s=10)
NOW = dt.datetime.now(dt.UTC)


@dataclass
class Ca:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    file: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(directory: Path, cn: str) -> Ca:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    file = directory / f"{cn.replace(' ', '-')}.pem"
    file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Ca(key, cert, file)


def make_leaf(
    directory: Path,
    label: str,
    *,
    ca: Ca | None,
    sans: list[x509.GeneralName],
    not_after: dt.datetime = NOW + dt.timedelta(days=30),
) -> tuple[Path, Path, str]:
    """A server certificate (signed by ``ca``, or self-signed when None); returns cert, key, fingerprint."""
    key = ec.generate_private_key(ec.SECP256R1())
    issuer_name, issuer_key = (ca.cert.subject, ca.key) if ca else (_name(label), key)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(label))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=60))
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(issuer_key, hashes.SHA256())
    )
    cert_file, key_file = directory / f"{label}.pem", directory / f"{label}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file, ":".join(f"{b:02X}" for b in cert.fingerprint(hashes.SHA256()))


class _Root(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"Vendor": "Dell"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator:
    """Start a real HTTPS server on 127.0.0.1 with the given certificate; returns its URL."""
    servers: list[ThreadingHTTPServer] = []

    def start(cert_file: Path, key_file: Path) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Root)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"https://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def connect(url: str, **tls: object) -> E.TLSError:
    target = BmcTarget(name="bmc-tls", url=url, username="root", password=SecretStr(PASSWORD), **tls)  # type: ignore[arg-type]
    with pytest.raises(E.TLSError) as info, BmcConnection(target, POLICY):
        pass
    err = info.value
    assert err.bmc == "bmc-tls" and err.message.startswith("bmc-tls")
    assert "fix:" in err.message
    assert PASSWORD not in err.message and PASSWORD not in json.dumps(err.as_dict())
    return err


LOOPBACK = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]


def test_a_good_certificate_connects(tmp_path: Path, serve) -> None:
    ca = make_ca(tmp_path, "good CA")
    url = serve(*make_leaf(tmp_path, "good", ca=ca, sans=LOOPBACK)[:2])
    target = BmcTarget(name="bmc-tls", url=url, username="root", password=SecretStr(PASSWORD), ca_file=ca.file)
    with BmcConnection(target, POLICY) as conn:  # this tiny server has no SessionService: basic auth
        assert conn.root == {"Vendor": "Dell"} and conn.auth_mode == "basic"


def test_unknown_ca(tmp_path: Path, serve) -> None:
    signer, other = make_ca(tmp_path, "signer CA"), make_ca(tmp_path, "other CA")
    url = serve(*make_leaf(tmp_path, "leaf", ca=signer, sans=LOOPBACK)[:2])
    err = connect(url, ca_file=other.file)
    assert err.problem == "unknown_ca"
    assert "signed by a CA" in err.message and str(other.file) in err.message and "bmc.ca_file" in err.message


def test_unknown_ca_when_the_bmc_sends_its_whole_chain(tmp_path: Path, serve) -> None:
    """An iDRAC that sends its CA along with its certificate (OpenSSL: "self-signed certificate in certificate
    chain") is signed by a CA the bundle does not hold; it does not present a self-signed certificate."""
    signer, other = make_ca(tmp_path, "signer CA"), make_ca(tmp_path, "other CA")
    cert, key, _ = make_leaf(tmp_path, "leaf", ca=signer, sans=LOOPBACK)
    chain = tmp_path / "chain.pem"
    chain.write_bytes(cert.read_bytes() + signer.file.read_bytes())
    err = connect(serve(chain, key), ca_file=other.file)
    assert err.problem == "unknown_ca"
    assert "signed by a CA" in err.message and str(other.file) in err.message and "self-signed" not in err.message


def test_expired_certificate(tmp_path: Path, serve) -> None:
    ca = make_ca(tmp_path, "CA")
    url = serve(*make_leaf(tmp_path, "old", ca=ca, sans=LOOPBACK, not_after=NOW - dt.timedelta(days=1))[:2])
    err = connect(url, ca_file=ca.file)
    assert err.problem == "expired"
    assert "expired" in err.message and "renew" in err.message


def test_name_or_ip_mismatch(tmp_path: Path, serve) -> None:
    ca = make_ca(tmp_path, "CA")
    sans = [x509.DNSName("idrac-other.example"), x509.IPAddress(ipaddress.ip_address("10.9.9.9"))]
    url = serve(*make_leaf(tmp_path, "elsewhere", ca=ca, sans=sans)[:2])
    err = connect(url, ca_file=ca.file)
    assert err.problem == "name_mismatch"
    assert "not valid for 127.0.0.1" in err.message and "bmc.address" in err.message


def test_self_signed(tmp_path: Path, serve) -> None:
    url = serve(*make_leaf(tmp_path, "selfie", ca=None, sans=LOOPBACK)[:2])
    err = connect(url)  # the system CA store
    assert err.problem == "self_signed"
    assert "self-signed" in err.message and "system CA store" in err.message and "bmc.fingerprint" in err.message


def test_pinned_fingerprint_mismatch(tmp_path: Path, serve) -> None:
    ca = make_ca(tmp_path, "CA")
    cert, key, real = make_leaf(tmp_path, "pinned", ca=ca, sans=LOOPBACK)
    url = serve(cert, key)
    wrong = "AB:" * 31 + "AB"
    err = connect(url, fingerprint=wrong)
    assert err.problem == "fingerprint_mismatch"
    assert "pinned fingerprint" in err.message and "bmc.fingerprint" in err.message
    assert wrong not in err.message and real not in err.message  # the text names the field, not the values


def test_each_failure_has_its_own_message(tmp_path: Path, serve) -> None:
    """The five causes never collapse into one generic text."""
    ca, other = make_ca(tmp_path, "CA"), make_ca(tmp_path, "other")
    leaf = make_leaf(tmp_path, "ok", ca=ca, sans=LOOPBACK)
    cases = {
        "unknown_ca": (serve(*leaf[:2]), {"ca_file": other.file}),
        "expired": (
            serve(*make_leaf(tmp_path, "old", ca=ca, sans=LOOPBACK, not_after=NOW - dt.timedelta(days=1))[:2]),
            {"ca_file": ca.file},
        ),
        "name_mismatch": (
            serve(*make_leaf(tmp_path, "far", ca=ca, sans=[x509.DNSName("x.example")])[:2]),
            {"ca_file": ca.file},
        ),
        "self_signed": (serve(*make_leaf(tmp_path, "self", ca=None, sans=LOOPBACK)[:2]), {}),
        "fingerprint_mismatch": (serve(*leaf[:2]), {"fingerprint": "CD:" * 31 + "CD"}),
    }
    messages = {problem: connect(url, **tls).reason for problem, (url, tls) in cases.items()}
    assert len(set(messages.values())) == len(cases), messages
