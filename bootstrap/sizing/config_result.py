"""One model on ``tp`` GPUs of one server type: usable or not, why, and the figures behind it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ConfigResult:
    """One model on ``tp`` GPUs of one server type: usable or not, and why."""

    tp: int
    reasons: list[str] = field(default_factory=list)
    first_token_ms: float | None = None
    tokens_per_s: float | None = None
    response_ms: float | None = None
    peak_concurrency: int | None = None
    instances: int | None = None
    #: Measured path: whole servers dedicated to this model, and the arithmetic behind the number.
    servers: int | None = None
    arithmetic: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.reasons

    @property
    def gpus(self) -> int | None:
        return None if self.instances is None else self.instances * self.tp

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"tensor_parallel": self.tp, "fits": self.ok}
        data["basis"] = "measured" if self.arithmetic is not None else "design guide"
        if self.ok and self.arithmetic is not None:
            data.update(instances=self.instances, gpus=self.gpus, servers=self.servers, **self.arithmetic)
        elif self.ok:
            data.update(
                instances=self.instances,
                gpus=self.gpus,
                first_token_ms=_round(self.first_token_ms),
                instance_tokens_per_s=self.tokens_per_s,
                response_ms=_round(self.response_ms),
                peak_concurrency=self.peak_concurrency,
            )
        else:
            data["why_not"] = self.reasons
        return data


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
