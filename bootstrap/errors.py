"""Errors a user can act on, and the process exit codes rackctl documents.

Exit codes:
  0  success
  1  the operation ran and something failed (a node, a check, a stage)
  2  invalid input: inventory, arguments or files (nothing was changed)
  3  this machine lacks something rackctl needs (see ``rackctl doctor``)
  4  the requested stage or feature is not implemented yet (the run stopped there)
  5  not applied: every stage that ran succeeded, but at least one only rendered and validated its
     artefacts and applied nothing (``rackctl up`` through kubernetes/nvidia/triton today); the cluster
     is not brought up, so a script must not take this for success
  130 interrupted
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_ENVIRONMENT = 3
EXIT_NOT_IMPLEMENTED = 4
EXIT_NOT_APPLIED = 5
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Problem:
    """One finding: where it is (a YAML-style path), what is wrong, and how to fix it."""

    path: str
    message: str
    fix: str = ""
    line: int | None = None

    def as_dict(self) -> dict[str, str | int]:
        data: dict[str, str | int] = {"path": self.path, "message": self.message}
        if self.fix:
            data["fix"] = self.fix
        if self.line is not None:
            data["line"] = self.line
        return data

    def __str__(self) -> str:
        where = self.path + (f" (line {self.line})" if self.line is not None else "")
        text = f"{where}: {self.message}" if where else self.message
        return f"{text}; fix: {self.fix}" if self.fix else text


class RackctlError(Exception):
    """Base of errors shown to the user as a message (never a traceback)."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, problems: list[Problem] | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: each problem once (nodes sharing one credentials entry give the same finding), in order
        self.problems = list(dict.fromkeys(problems or []))


class InvalidInput(RackctlError):
    """Bad input: inventory, arguments, files. Exit code 2."""

    exit_code = EXIT_INVALID


class EnvironmentMissing(RackctlError):
    """The machine running rackctl lacks a tool or package. Exit code 3."""

    exit_code = EXIT_ENVIRONMENT


class NotImplementedStage(RackctlError):
    """A stage or feature that is not implemented yet. Exit code 4."""

    exit_code = EXIT_NOT_IMPLEMENTED


@dataclass
class Outcome:
    """Machine-readable result of a command, DeepOps-validator style: a clear ``ok``."""

    ok: bool
    data: dict = field(default_factory=dict)
