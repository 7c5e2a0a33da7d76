"""Bootstrap stages: the plugin interface (:mod:`.base`), placeholders and the runner (:mod:`.runner`)."""

from bootstrap.stages.base import (
    STAGE_ORDER,
    Lifecycle,
    NodeResult,
    NotImplementedYet,
    PlannedAction,
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
    "STAGE_ORDER",
    "Lifecycle",
    "NodeResult",
    "NotImplementedYet",
    "PlannedAction",
    "RunOptions",
    "Stage",
    "StageContext",
    "StageResult",
    "get_stage",
    "register_stage",
    "registered_stages",
    "unregister_stage",
]
