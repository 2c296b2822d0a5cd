"""cyclone-flow: a Postgres-backed workflow engine for YAML DAG flows.

Public API: :class:`Client`, :class:`Context` (what a handler receives), the option types
and the error tree.
"""

from cyclone_flow.client import Client, migrate
from cyclone_flow.config import ClientConfig, PayloadLimits, RetentionConfig
from cyclone_flow.db.rows import Run as RunStatus
from cyclone_flow.db.rows import Step as StepStatus
from cyclone_flow.engine.fan_out import MAX_FAN_OUT_ITEMS
from cyclone_flow.errors import (
    ConfigError,
    CycloneError,
    FlowError,
    InputValidationError,
    PayloadTooLargeError,
    PermanentError,
    Problem,
    ReclaimLimitExceeded,
    RunNotFoundError,
    RunStateError,
    ScheduleNotFoundError,
    SchemaOutdatedError,
    SignalRejectedError,
    StepTimeoutError,
    SubmitOptionError,
    TemplateError,
    TransactionOpenError,
    WaitTimeoutError,
)
from cyclone_flow.events import StepEvent
from cyclone_flow.flowfile import load_flow
from cyclone_flow.flowfile.model import Flow, Node
from cyclone_flow.notify import WakeupTracker
from cyclone_flow.producer import RunId
from cyclone_flow.states import ErrorKind, RunState, StepState
from cyclone_flow.worker.context import Context
from cyclone_flow.worker.imports import AllowList

__all__ = [
    "MAX_FAN_OUT_ITEMS",
    "AllowList",
    "Client",
    "ClientConfig",
    "ConfigError",
    "Context",
    "CycloneError",
    "ErrorKind",
    "Flow",
    "FlowError",
    "InputValidationError",
    "Node",
    "PayloadLimits",
    "PayloadTooLargeError",
    "PermanentError",
    "Problem",
    "ReclaimLimitExceeded",
    "RetentionConfig",
    "RunId",
    "RunNotFoundError",
    "RunState",
    "RunStateError",
    "RunStatus",
    "ScheduleNotFoundError",
    "SchemaOutdatedError",
    "SignalRejectedError",
    "StepEvent",
    "StepState",
    "StepStatus",
    "StepTimeoutError",
    "SubmitOptionError",
    "TemplateError",
    "TransactionOpenError",
    "WaitTimeoutError",
    "WakeupTracker",
    "load_flow",
    "migrate",
]
