"""Bootstrap stages: the plugin interface (:mod:`.base`), placeholders and the runner (:mod:`.runner`)."""

from bootstrap.stages.base import (
    NOT_APPLIED,
    STAGE_ORDER,
    Lifecycle,
    NodeResult,
    NotImplementedYet,
    PlannedAction,
    Rendered,
    RunOptions,
    Stage,
    StageContext,
    StageResult,
    get_stage,
    register_stage,
    registered_stages,
    unregister_stage,
)

__all__ = [
    "NOT_APPLIED",
    "STAGE_ORDER",
    "Lifecycle",
    "NodeResult",
    "NotImplementedYet",
    "PlannedAction",
    "Rendered",
    "RunOptions",
    "Stage",
    "StageContext",
    "StageResult",
    "get_stage",
    "register_stage",
    "registered_stages",
    "unregister_stage",
]
