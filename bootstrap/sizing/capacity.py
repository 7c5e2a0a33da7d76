"""The fleet arithmetic, exact and shown: capacity per instance and server, the peak, servers, headroom.

Numbers are :class:`~fractions.Fraction` built from the decimal the user wrote, so a capacity of 12.3 req/s
on 3 servers meets a peak of 36.9 req/s exactly (floats would need a fourth server).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

REQUESTS_PER_S = "req/s"
CONCURRENT = "concurrent requests"


def exact(value: float | int | Fraction) -> Fraction:
    """The value as the user wrote it: ``Fraction(repr(36.9))`` is 369/10, not the binary float."""
    if isinstance(value, float):
        return Fraction(repr(value))
    return Fraction(value)


def show(value: Fraction | int) -> str:
    """A number for people: whole numbers as such, others to 6 significant digits."""
    value = Fraction(value)
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.6g}"


@dataclass(frozen=True)
class Arithmetic:
    """How many instances (and servers, were the model alone) a peak needs, step by step."""

    unit: str
    per_instance: Fraction
    instances_per_server: int
    peak: Fraction
    peak_from: str
    min_instances: int = 1
    redundancy: int = 0

    @property
    def per_server(self) -> Fraction:
        return self.per_instance * self.instances_per_server

    @property
    def instances_for_peak(self) -> int:
        return math.ceil(self.peak / self.per_instance)

    @property
    def servers_for_peak(self) -> int:
        return math.ceil(self.peak / self.per_server)

    @property
    def spare_instances(self) -> int:
        return self.redundancy * self.instances_per_server

    @property
    def instances(self) -> int:
        return max(self.min_instances, self.instances_for_peak) + self.spare_instances

    @property
    def servers_alone(self) -> int:
        """Servers this model needs on its own (the placement may share them with other models)."""
        return math.ceil(self.instances / self.instances_per_server)

    @property
    def capacity(self) -> Fraction:
        return self.instances * self.per_instance

    @property
    def headroom(self) -> Fraction:
        return self.capacity - self.peak

    def steps(self) -> list[str]:
        """The arithmetic as lines an operator can check by hand."""
        u = self.unit
        lines = [
            f"capacity: {show(self.per_instance)} {u} per instance x {self.instances_per_server} "
            f"instances per server = {show(self.per_server)} {u} per server",
            f"peak: {show(self.peak)} {u} ({self.peak_from})",
            f"servers for the peak: ceil({show(self.peak)} / {show(self.per_server)}) = {self.servers_for_peak}; "
            f"instances: ceil({show(self.peak)} / {show(self.per_instance)}) = {self.instances_for_peak}",
        ]
        if self.min_instances > self.instances_for_peak:
            lines.append(f"min_instances {self.min_instances} > {self.instances_for_peak}: {self.min_instances}")
        if self.redundancy:
            lines.append(
                f"redundancy N+{self.redundancy}: + {self.redundancy} x {self.instances_per_server} "
                f"= {self.spare_instances} spare instances"
            )
        lines.append(
            f"instances: {self.instances} ({self.servers_alone} server(s) alone); headroom: "
            f"{self.instances} x {show(self.per_instance)} - {show(self.peak)} = {show(self.headroom)} {u}"
        )
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "capacity_per_instance": _num(self.per_instance),
            "instances_per_server": self.instances_per_server,
            "capacity_per_server": _num(self.per_server),
            "peak": _num(self.peak),
            "peak_from": self.peak_from,
            "servers_for_peak": self.servers_for_peak,
            "instances_for_peak": self.instances_for_peak,
            "min_instances": self.min_instances,
            "redundancy": self.redundancy,
            "spare_instances": self.spare_instances,
            "instances": self.instances,
            "servers_alone": self.servers_alone,
            "capacity": _num(self.capacity),
            "headroom": _num(self.headroom),
            "steps": self.steps(),
        }


def _num(value: Fraction) -> int | float:
    return value.numerator if value.denominator == 1 else round(float(value), 6)
