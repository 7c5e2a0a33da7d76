"""The inventory's ``firmware:`` section: per hardware model the target versions, where each image comes
from (an image URI per component, or a Dell repository catalog), the head node's mirror, and the rollout
policy of ``rackctl firmware apply``.

```yaml
firmware:
  image_base_url: http://10.0.0.1/mirror/firmware/   # relative image paths resolve against it
  rollout: {max_unavailable: 25%, failure_threshold: 2}
  baseline:
    R660:
      idrac: 7.10.30.00
      bios: 2.3.5
      images:
        idrac: iDRAC-with-Lifecycle-Controller_Firmware_XXXXX_LN64_7.10.30.00_A00.EXE
        bios: BIOS_XXXXX_WN64_2.3.5.EXE
    XE9680:
      repository: {url: http://10.0.0.1/mirror/dell-repo/, catalog: Catalog.xml}
```
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urljoin, urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Firmware components rackctl knows, in the order Dell recommends updating them.
Component = Literal["idrac", "bios", "nic", "gpu", "raid", "cpld"]
COMPONENT_ORDER: tuple[str, ...] = ("idrac", "bios", "nic", "gpu", "raid", "cpld")
IMAGE_SCHEMES = ("http", "https", "nfs", "cifs", "tftp")
VERSION_RE = re.compile(r"^\d+(\.\d+)*([.-][0-9A-Za-z]+)*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, validate_default=True)


class FirmwareRepository(_Strict):
    """A Dell update repository (catalog), applied with ``InstallFromRepository``."""

    url: str = Field(description="Share holding the catalog, e.g. http://10.0.0.1/mirror/dell-repo/.")
    catalog: str = Field(default="Catalog.xml", description="Catalog file name inside the share.")

    @field_validator("url")
    @classmethod
    def _share_url(cls, value: str) -> str:
        parsed = urlparse(value)
        if parsed.password is not None:
            raise ValueError("the share URL carries a password; no password goes in the inventory")
        if parsed.scheme not in ("http", "https", "nfs", "cifs") or not parsed.hostname:
            raise ValueError(f"{value!r} is not an http(s)/nfs/cifs share URL like http://10.0.0.1/dell-repo/")
        return value


class FirmwareMinimum(_Strict):
    """Target firmware of one hardware model: versions, and where the images come from."""

    bios: str | None = Field(default=None, description="Least BIOS version, e.g. 1.6.2.")
    idrac: str | None = Field(default=None, description="Least iDRAC firmware version, e.g. 7.00.00.00.")
    nic: str | None = Field(default=None, description="Least NIC firmware version (every NIC of the node).")
    gpu: str | None = Field(default=None, description="Least GPU firmware (VBIOS/board) version.")
    raid: str | None = Field(default=None, description="Least storage controller (PERC) firmware version.")
    cpld: str | None = Field(default=None, description="Least system CPLD version.")
    images: dict[Component, str] = Field(
        default_factory=dict,
        description="Component -> update package: a URI, or a path under firmware.image_base_url.",
    )
    repository: FirmwareRepository | None = Field(
        default=None, description="A Dell repository catalog instead of single images (InstallFromRepository)."
    )

    @model_validator(mode="after")
    def _images_have_versions(self) -> FirmwareMinimum:
        for component in self.images:
            if getattr(self, component) is None:
                raise ValueError(
                    f"images.{component} is given but no {component} version: add `{component}: <version>` "
                    "so the rollout knows when the node is done"
                )
        if self.images and self.repository is not None:
            raise ValueError("give either images or a repository for a model, not both")
        return self

    def targets(self) -> dict[str, str]:
        """Component -> target version, in update order."""
        return {c: v for c in COMPONENT_ORDER if (v := getattr(self, c)) is not None}


class RolloutSettings(_Strict):
    """How ``rackctl firmware apply`` rolls out (control planes always go one at a time)."""

    max_unavailable: int | str = Field(
        default=1, description="Workers updated at once: a count or a percentage of the workers, e.g. '25%'."
    )
    failure_threshold: int = Field(default=1, ge=1, description="Stop the rollout once this many nodes failed.")

    @field_validator("max_unavailable")
    @classmethod
    def _count_or_percent(cls, value: int | str) -> int | str:
        if isinstance(value, int):
            if value < 1:
                raise ValueError(f"{value} is not a count of at least 1")
            return value
        match = re.fullmatch(r"(\d{1,3})%", value)
        if match is None or not 0 < int(match.group(1)) <= 100:
            raise ValueError(f"{value!r} is neither a count nor a percentage like '25%'")
        return value


class Firmware(_Strict):
    """The firmware baseline per hardware model, its images, and the rollout policy."""

    baseline: dict[str, FirmwareMinimum] = Field(default_factory=dict, description="Hardware model -> targets.")
    image_base_url: str | None = Field(
        default=None,
        description="Base URL relative image paths resolve against (e.g. the head node's mirror).",
    )
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)

    @field_validator("image_base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parsed = urlparse(value)
        if parsed.scheme not in IMAGE_SCHEMES or not parsed.hostname:
            raise ValueError(f"{value!r} is not a URL like http://10.0.0.1/mirror/firmware/")
        return value if value.endswith("/") else value + "/"

    @model_validator(mode="after")
    def _relative_images_need_a_base(self) -> Firmware:
        for model, minimum in self.baseline.items():
            for component, image in minimum.images.items():
                if urlparse(image).password is not None:
                    raise ValueError(
                        f"baseline.{model}.images.{component}: the URI carries a password; no password goes in "
                        "the inventory: serve the images without one (e.g. from the head node's mirror)"
                    )
                if urlparse(image).scheme:
                    if urlparse(image).scheme not in IMAGE_SCHEMES:
                        raise ValueError(
                            f"baseline.{model}.images.{component}: {image!r} is not an {'/'.join(IMAGE_SCHEMES)} URI"
                        )
                elif self.image_base_url is None:
                    raise ValueError(
                        f"baseline.{model}.images.{component}: {image!r} is a relative path and "
                        "firmware.image_base_url is not set; set it (e.g. the head node's mirror) or give a full URI"
                    )
        return self

    def image_uri(self, model: str, component: str) -> str | None:
        """The full URI of a model's image for a component (None: none given)."""
        minimum = self.baseline.get(model)
        image = minimum.images.get(component) if minimum else None  # type: ignore[call-overload]
        if image is None:
            return None
        if urlparse(image).scheme:
            return image
        return urljoin(self.image_base_url or "", image.lstrip("/"))
