"""A real kube-apiserver + etcd on loopback: the lab's pinned release, built from its Go modules.

The binaries come from ``rackctl lab components`` (the ``kube_components`` fixture): kube-apiserver 1.37.2 and
etcd 3.7.0 today. Test tooling, envtest style: etcd and kube-apiserver on random free loopback ports,
a temporary PKI made with ``cryptography`` (CA, serving cert, a ``system:masters`` client cert, the
service-account key). No controller-manager runs, so the ``ServiceAccount`` admission plugin is off (nothing
would create the ``default`` service accounts it insists on). :class:`ApiServer` talks plain HTTPS
(``requests``): discovery, create, server-side dry-run (``?dryRun=All``).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.ports import free_ports


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    issuer: tuple[x509.Name, rsa.RSAPrivateKey] | None,
    *,
    ca: bool = False,
    sans: list[x509.GeneralName] | None = None,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=not ca,
                content_commitment=False,
                key_encipherment=not ca,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


@dataclass
class Pki:
    """File paths of the temporary PKI."""

    ca: Path
    serving_cert: Path
    serving_key: Path
    client_cert: Path
    client_key: Path
    sa_key: Path
    sa_pub: Path


def make_pki(root: Path) -> Pki:
    """CA; serving cert for 127.0.0.1/localhost; admin client cert (O=system:masters); SA key pair."""
    root.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("rackctl-test-ca")
    ca = _cert(ca_name, ca_key, None, ca=True)
    srv_key = _key()
    sans: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    srv = _cert(_name("kube-apiserver"), srv_key, (ca_name, ca_key), sans=sans, usage=ExtendedKeyUsageOID.SERVER_AUTH)
    cli_key = _key()
    cli = _cert(
        _name("rackctl-test-admin", "system:masters"), cli_key, (ca_name, ca_key), usage=ExtendedKeyUsageOID.CLIENT_AUTH
    )
    sa_key = _key()
    pem = serialization.Encoding.PEM
    files = {
        "ca.crt": ca.public_bytes(pem),
        "apiserver.crt": srv.public_bytes(pem),
        "apiserver.key": _pem_key(srv_key),
        "admin.crt": cli.public_bytes(pem),
        "admin.key": _pem_key(cli_key),
        "sa.key": _pem_key(sa_key),
        "sa.pub": sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo),
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
        (root / name).chmod(0o600)
    return Pki(
        *(root / n for n in ("ca.crt", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key", "sa.key", "sa.pub"))
    )


@dataclass
class ApiServer:
    """A running etcd + kube-apiserver pair and an HTTPS client for it."""

    url: str
    pki: Pki
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    session: requests.Session = field(default_factory=requests.Session)

    def __post_init__(self) -> None:
        self.session.cert = (str(self.pki.client_cert), str(self.pki.client_key))
        # Not session.verify: $REQUESTS_CA_BUNDLE would override it; verify= per request wins.
        self.session.trust_env = False

    @property
    def version(self) -> str:
        """The server's own ``gitVersion`` (``/version``), e.g. ``v1.37.2``."""
        version: str = self.get("/version").json()["gitVersion"]
        return version

    def get(self, path: str) -> requests.Response:
        return self.session.get(self.url + path, timeout=30, verify=str(self.pki.ca))

    def post(self, path: str, obj: dict[str, Any], *, dry_run: bool) -> requests.Response:
        """Create; with ``dry_run`` a server-side dry run that rejects unknown or duplicate fields (Strict)."""
        params = {"fieldManager": "rackctl-test"} | ({"dryRun": "All", "fieldValidation": "Strict"} if dry_run else {})
        return self.session.post(self.url + path, json=obj, params=params, timeout=60, verify=str(self.pki.ca))

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """Any call (PUT, PATCH, DELETE, ...) with the admin client cert and the CA pinned."""
        return self.session.request(method, self.url + path, timeout=60, verify=str(self.pki.ca), **kwargs)

    def write_kubeconfig(self, path: Path) -> Path:
        """An admin kubeconfig for ``kubectl``: the fixture's client cert, the CA pinned (no skip-verify)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.pki.ca)}}],
            "users": [
                {
                    "name": "admin",
                    "user": {"client-certificate": str(self.pki.client_cert), "client-key": str(self.pki.client_key)},
                }
            ],
            "contexts": [{"name": "admin@test", "context": {"cluster": "test", "user": "admin"}}],
            "current-context": "admin@test",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        return path

    def logs(self) -> str:
        return "\n".join(
            f"===== {p.name}\n{p.read_text(errors='replace')[-20000:]}" for p in sorted(self.workdir.glob("*.log"))
        )

    def stop(self) -> None:
        for proc in reversed(self.processes):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _spawn(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _wait_ready(server: ApiServer, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    last = ""
    while time.monotonic() < end:
        for proc in server.processes:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}\n{server.logs()[-6000:]}")
        try:
            resp = server.get("/readyz")
            if resp.status_code == 200:
                return
            last = f"{resp.status_code} {resp.text[-500:]}"
        except requests.RequestException as exc:
            last = str(exc)
        time.sleep(0.5)
    raise RuntimeError(f"kube-apiserver not ready after {deadline_s:.0f} s: {last}\n{server.logs()[-6000:]}")


def start(binary: Path, etcd: Path, workdir: Path) -> ApiServer:
    """Start ``etcd`` and the kube-apiserver ``binary`` under ``workdir``; return once /readyz answers 200."""
    pki = make_pki(workdir / "pki")
    etcd_port, peer_port, api_port = free_ports(3)
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    server = ApiServer(f"https://127.0.0.1:{api_port}", pki, workdir)
    server.processes.append(
        _spawn(
            [
                str(etcd),
                "--name=rackctl-test",
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=rackctl-test=http://127.0.0.1:{peer_port}",
            ],
            workdir / "etcd.log",
        )
    )
    server.processes.append(
        _spawn(
            [
                str(binary),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={workdir / 'certs'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/12",
                "--authorization-mode=Node,RBAC",
                "--disable-admission-plugins=ServiceAccount",
                "--allow-privileged=true",
                # Loopback may not be a Service endpoint: no reconciler for the "kubernetes" Service.
                "--endpoint-reconciler-type=none",
            ],
            workdir / "kube-apiserver.log",
        )
    )
    try:
        _wait_ready(server, 120)
    except BaseException:
        server.stop()
        raise
    return server
