"""``rackctl up/plan --charts DIR --crds DIR``: the local inputs the kubernetes and nvidia stages render with.

The same two directories ``rackctl render cluster`` takes: ``--charts`` holds the pinned chart archives
(``<chart>-<version>.tgz`` or unpacked ``<chart>/``), rendered with rackctl's values by helm-python-sdk;
``--crds`` holds CRD YAML (the pinned charts' ``crds/``) the custom resources are checked against. They
travel in ``RunOptions.cluster``; without them the stages
render without chart manifests and record the custom-resource check as unchecked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bootstrap.errors import InvalidInput, Problem

#: What each option's directory must hold (said in the fix of a bad one).
HOLDS = {
    "--charts": "the pinned chart archives (<chart>-<version>.tgz, as `helm pull` names them) or unpacked charts",
    "--crds": "CRD YAML files (the pinned charts' crds/ directories)",
}


@dataclass(frozen=True)
class ClusterInputs:
    """The chart and CRD directories of one run (``None``: not given)."""

    charts: Path | None = None
    crds: Path | None = None

    def given(self) -> dict[str, str]:
        """Only what was given, by name (``charts``, ``crds``): the ``up`` flags of the run's command line."""
        given = {"charts": self.charts, "crds": self.crds}
        return {key: str(path) for key, path in given.items() if path is not None}

    def described(self) -> str:
        """``"; charts from DIR, custom resources checked against the CRDs in DIR"`` (empty when none)."""
        parts = []
        if self.charts is not None:
            parts.append(f"chart manifests rendered from the archives in {self.charts}")
        if self.crds is not None:
            parts.append(f"custom resources checked against the CRDs in {self.crds}")
        return "".join(f"; {part}" for part in parts)


def require_dir(option: str, path: Path | None) -> Path | None:
    """``path`` when it is an existing directory (or ``None``); bad input naming ``option`` otherwise."""
    if path is None:
        return None
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise InvalidInput(
            f"{option} {path}: {what}",
            problems=[Problem(option, f"{str(path)!r} {what}", f"give a directory holding {HOLDS[option]}")],
        )
    return path


def checked_inputs(charts: Path | None, crds: Path | None) -> ClusterInputs:
    """The options of ``up``/``plan`` checked (a missing directory is bad input, exit 2)."""
    return ClusterInputs(require_dir("--charts", charts), require_dir("--crds", crds))


def cluster_inputs(given: ClusterInputs) -> ClusterInputs:
    """The directories a run was given (``RunOptions.cluster``), checked again: the run may be resumed."""
    return checked_inputs(given.charts, given.crds)
