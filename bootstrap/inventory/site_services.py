"""Where nodes get their software: the package source and the container registry (one setting each).

Every role reads these through the group vars :mod:`bootstrap.inband.render` emits
(``rackctl_package_source``, ``rackctl_registry``); nothing else in the product chooses a source.

- packages: ``mirror`` (the head node's signed apt repository, built by ``rackctl mirror build``),
  ``public`` (the distribution's archive) or ``site`` (an existing site mirror: its URL and key);
- containers: ``head`` (the head node's registry, TLS from the site CA) or ``external`` (a registry named here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bootstrap.inventory.package_upstreams import PackageUpstreams

#: Debian's archive and the keyring every Debian system carries.
PUBLIC_DEBIAN_URI = "http://deb.debian.org/debian"
DEBIAN_ARCHIVE_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MIRROR_PORT = 8081
REGISTRY_PORT = 5000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, validate_default=True)


class PackageSource(_Strict):
    """Where apt on every node gets packages from."""

    source: Literal["mirror", "public", "site"] = Field(
        default="mirror", description="mirror: the head node's; public: the distribution's archive; site: `uri`."
    )
    uri: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s]+$",
        description="site: the site mirror's URL; public: overrides deb.debian.org; mirror: not used.",
    )
    key_file: Path | None = Field(
        default=None, description="site: the mirror's armored public key (relative to the inventory file)."
    )
    suite: str = Field(default="bookworm", pattern=r"^[a-z0-9][a-z0-9.-]*$", description="Distribution suite.")
    components: list[str] = Field(default_factory=lambda: ["main"], min_length=1)
    port: int = Field(default=MIRROR_PORT, ge=1, le=65535, description="mirror: the head node's HTTP port.")
    pins: dict[str, str] = Field(
        default_factory=dict, description="mirror: package -> exact version to mirror (else the suite's candidate)."
    )
    upstreams: PackageUpstreams = Field(
        default_factory=PackageUpstreams,
        description="mirror: repositories beside Debian's it also carries (Kubernetes', NVIDIA's).",
    )

    @model_validator(mode="after")
    def _site_needs_uri_and_key(self) -> PackageSource:
        if self.source == "site" and (self.uri is None or self.key_file is None):
            raise ValueError("source: site needs `uri` (the site mirror's URL) and `key_file` (its public key)")
        if self.source == "mirror" and self.uri is not None:
            raise ValueError("source: mirror is served by the head node; remove `uri` (or use source: site)")
        if self.source != "mirror" and "upstreams" in self.model_fields_set:
            raise ValueError(
                f"upstreams are what `rackctl mirror build` adds to the head node's mirror; with source: {self.source} "
                "they are not used: remove `upstreams` (or use source: mirror)"
            )
        return self


class RegistryTls(_Strict):
    """The head node's registry certificate (signed by the site CA) and that CA."""

    cert_file: Path
    key_file: Path
    ca_file: Path


class ContainerRegistry(_Strict):
    """Where containerd on every node pulls images from."""

    source: Literal["head", "external"] = Field(
        default="head", description="head: the head node's registry; external: `host`:`port`."
    )
    host: str | None = Field(default=None, pattern=r"^[A-Za-z0-9.-]+$", description="external: the registry's name.")
    port: int = Field(default=REGISTRY_PORT, ge=1, le=65535)
    ca_file: Path | None = Field(default=None, description="external: CA bundle of the registry's certificate.")
    tls: RegistryTls | None = Field(
        default=None, description="head on a real site: certificate, key and CA (the lab makes its own)."
    )

    @model_validator(mode="after")
    def _external_needs_host(self) -> ContainerRegistry:
        if self.source == "external" and self.host is None:
            raise ValueError("source: external needs `host` (the registry's DNS name or address)")
        if self.source == "head" and self.host is not None:
            raise ValueError("source: head is served on the head node's address; remove `host`")
        return self


class SiteServices(_Strict):
    """The inventory's ``site_services:``: package source and container registry."""

    packages: PackageSource = Field(default_factory=PackageSource)
    registry: ContainerRegistry = Field(default_factory=ContainerRegistry)
