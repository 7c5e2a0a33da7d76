"""os-check: the in-band preflight, run over SSH on installed nodes (``playbooks/preflight.yml``).

After ``provision`` and before ``network``: per node, the OS family, memory, free space on ``/`` and the
commands the later stages use (role ``preflight``); what it finds (``preflight_report``: OS, kernel,
memory, CPUs, DMI serial and UUID) is recorded in the journal. Read-only; moves no node. Not to be
confused with the controller-side ``preflight`` stage (BMC credentials, TLS, reachability), which runs
before ``discover``. Thresholds can be lowered per run with ``RunOptions.extravars["os-check"]``
(e.g. ``preflight_min_memory_mb``).
"""

from __future__ import annotations

from bootstrap.stages.base import register_stage
from bootstrap.stages.playbook import PlaybookStage


@register_stage
class OsCheckStage(PlaybookStage):
    """Check each installed node's OS over SSH with Ansible; nothing is changed."""

    name = "os-check"
    description = "Check each installed node over SSH (OS, memory, disk, commands) with Ansible"
    playbook = "preflight.yml"
    facts_var = "preflight_report"
