"""Upstream support windows and published driver images: the tables behind the end-of-life warnings and
the operator's driver tag."""

from __future__ import annotations

from datetime import date

import pytest

from bootstrap.inventory.driver_images import os_release_tag, published_driver_tag
from bootstrap.inventory.support import kubernetes_eol, operator_past_support, supported_kubernetes

DAY = date(2026, 11, 27)  # the day the tables were read


@pytest.mark.parametrize(
    ("version", "ended"),
    [("1.33.5", "on 2026-06-28"), ("1.34.2", "on 2026-10-27"), ("1.27.6", "before 2026-06-28"), ("1.20.2", "before")],
)
def test_minors_past_their_end_of_life(version: str, ended: str) -> None:
    assert ended in (kubernetes_eol(version, DAY) or "")


@pytest.mark.parametrize("version", ["1.35.0", "1.36.3", "1.37.2", "1.38.0"])  # 1.38: newer than the table
def test_supported_minors_have_no_warning(version: str) -> None:
    assert kubernetes_eol(version, DAY) is None


def test_the_end_of_life_follows_the_date() -> None:
    assert kubernetes_eol("1.34.2", date(2026, 10, 26)) is None
    assert kubernetes_eol("1.34.2", date(2026, 10, 27)) is not None
    assert supported_kubernetes(DAY) == ["1.35", "1.36", "1.37"]


@pytest.mark.parametrize(
    ("chart", "past"),
    [
        ("v25.10.0", True),
        ("v22.9.2", True),
        ("25.3.4", True),
        ("v26.3.0", False),
        ("v26.7.0", False),
        ("v27.1.0", False),
    ],
)
def test_operator_lines_past_support(chart: str, past: bool) -> None:
    assert (operator_past_support(chart) is not None) is past


@pytest.mark.parametrize(
    ("os_name", "tag"),
    [
        ("ubuntu-22.04", "ubuntu22.04"),
        ("ubuntu-24.04", "ubuntu24.04"),
        ("rhel-9.4", "rhel9.4"),
        ("rhel-8.10", "rhel8.10"),
        ("rhcos-4.16", "rhcos4.16"),
        ("ubuntu-20.10", None),  # not an LTS the operator supports
        ("debian-12", None),  # NVIDIA/gpu-operator#1212: not found
        ("debian-13", None),
        ("rhel-9", None),  # the operator appends VERSION_ID, 9.x, never a bare major
        ("Ubuntu 24.04", None),
    ],
)
def test_published_driver_tags(os_name: str, tag: str | None) -> None:
    assert published_driver_tag(os_name) == tag


def test_the_tag_the_operator_would_pull_on_debian() -> None:
    assert os_release_tag("debian-12") == "debian12" and os_release_tag("odd") is None
