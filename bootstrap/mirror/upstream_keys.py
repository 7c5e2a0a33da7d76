"""The signing key of each extra upstream, as a keyring apt's ``signed-by`` reads.

The operator's ``key_file`` is taken as given (an air-gapped site's staging copy is signed by whatever key
the site says). Otherwise the key is fetched from the upstream's documented URL and must be exactly the key
whose fingerprint rackctl pins (:mod:`bootstrap.inventory.package_upstreams`): a fetched key is trusted
only through that pin. Either way only the public keys are exported, with gpg, into
``<apt-state>/keys/<upstream>.gpg``; the host's keyrings are never read or written.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from bootstrap.errors import EnvironmentMissing, InvalidInput, Problem, RackctlError
from bootstrap.fsutil import atomic_write_bytes
from bootstrap.mirror.sitekey import stop_agent
from bootstrap.mirror.upstreams import ExtraRepo

#: A key file larger than this is not a key (the upstreams' are a few KiB).
MAX_KEY_BYTES = 1 << 20
FETCH_TIMEOUT_S = 30.0


class KeyFetchError(RackctlError):
    """An upstream's key could not be downloaded (network, HTTP status)."""


def _gpg(home: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    if shutil.which("gpg") is None:
        raise EnvironmentMissing("gpg not found; install the Debian package 'gnupg'")
    return subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--no-tty", *args], capture_output=True, check=False
    )


def primary_fingerprints(home: Path) -> list[str]:
    """Fingerprints of the primary keys in the GnuPG home ``home`` (subkeys left out)."""
    out = _gpg(home, "--with-colons", "--list-keys").stdout.decode("utf-8", "replace")
    found, previous = [], ""
    for line in out.splitlines():
        kind = line.split(":", 1)[0]
        if kind == "fpr" and previous == "pub":
            found.append(line.split(":")[9].upper())
        if kind in {"pub", "sub"}:
            previous = kind
        elif kind == "fpr":
            previous = ""
    return found


def fetch_key(repo: ExtraRepo, *, timeout: float = FETCH_TIMEOUT_S) -> bytes:
    """The key published at ``repo.key_url`` (bytes, at most :data:`MAX_KEY_BYTES`)."""
    assert repo.key_url is not None
    fix = f"check that this machine reaches {repo.key_url}, or set {repo.field}.key_file to the key (air-gapped)"
    try:
        with urllib.request.urlopen(repo.key_url, timeout=timeout) as response:  # noqa: S310 - http(s) from the model
            data: bytes = response.read(MAX_KEY_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise KeyFetchError(
            f"cannot fetch the signing key of {repo.title}",
            problems=[Problem(repo.field, f"{repo.key_url}: HTTP {exc.code} {exc.reason}", fix)],
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise KeyFetchError(
            f"cannot fetch the signing key of {repo.title}",
            problems=[Problem(repo.field, f"{repo.key_url}: {reason}", fix)],
        ) from None
    if len(data) > MAX_KEY_BYTES:
        raise KeyFetchError(
            f"the signing key of {repo.title} is not a key",
            problems=[Problem(repo.field, f"{repo.key_url} is larger than {MAX_KEY_BYTES} bytes", fix)],
        )
    return data


def _read_key_file(repo: ExtraRepo) -> bytes:
    assert repo.key_file is not None
    where = f"{repo.field}.key_file"
    try:
        data = repo.key_file.read_bytes()
    except FileNotFoundError:
        raise InvalidInput(
            f"cannot read the signing key of {repo.title}",
            problems=[Problem(where, f"{repo.key_file} does not exist", "point it at the repository's public key")],
        ) from None
    except OSError as exc:
        raise InvalidInput(
            f"cannot read the signing key of {repo.title}",
            problems=[Problem(where, f"{repo.key_file}: {exc.strerror}", "point it at a readable file")],
        ) from None
    if len(data) > MAX_KEY_BYTES:
        raise InvalidInput(
            f"the signing key of {repo.title} is not a key",
            problems=[Problem(where, f"{repo.key_file} is larger than {MAX_KEY_BYTES} bytes", "point it at the key")],
        )
    return data


def keyring_for(repo: ExtraRepo, keys_dir: Path) -> Path:
    """Write ``keys_dir/<name>.gpg``: the upstream's public key(s), checked as the module says; its path."""
    data = _read_key_file(repo) if repo.key_file is not None else fetch_key(repo)
    origin = str(repo.key_file) if repo.key_file is not None else str(repo.key_url)
    where = f"{repo.field}.key_file" if repo.key_file is not None else repo.field
    with tempfile.TemporaryDirectory(prefix="rackctl-upstream-key.") as tmp:
        home = Path(tmp)
        home.chmod(0o700)
        try:
            (home / "key").write_bytes(data)
            imported = _gpg(home, "--import", str(home / "key"))
            found = primary_fingerprints(home)
            if imported.returncode != 0 or not found:
                raise InvalidInput(
                    f"the signing key of {repo.title} is not an OpenPGP public key",
                    problems=[Problem(where, f"{origin}: gpg imports no key from it", "point it at the public key")],
                )
            if repo.key_file is None and found != [repo.fingerprint]:
                raise InvalidInput(
                    f"the key published for {repo.title} is not the one rackctl pins; nothing was mirrored",
                    problems=[
                        Problem(
                            repo.field,
                            f"{origin} holds {', '.join(found)}, rackctl pins {repo.fingerprint}",
                            f"check the key out of band; if the upstream rotated it, set {repo.field}.key_file to "
                            "the new key once you trust it",
                        )
                    ],
                )
            exported = _gpg(home, "--export", *found)
        finally:
            stop_agent(home)
    if exported.returncode != 0 or not exported.stdout:
        raise InvalidInput(
            f"gpg cannot export the signing key of {repo.title}",
            problems=[Problem(where, exported.stderr.decode("utf-8", "replace")[-300:], "point it at the public key")],
        )
    keys_dir.mkdir(parents=True, exist_ok=True)
    return atomic_write_bytes(keys_dir / f"{repo.name}.gpg", exported.stdout)
