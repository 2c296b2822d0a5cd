"""cyclone-flow: a Postgres-backed workflow engine for YAML DAG flows.

Public API: :class:`Client` and :func:`migrate`, :func:`load_flow`, :class:`Context` (what
a handler receives), the option types, the rows and states a user reads (:class:`Run`,
:class:`Step`, :class:`StepLogLine`, :class:`WorkerRow`, :class:`RunState`,
:class:`StepState`, :class:`ErrorKind`, :class:`StepEvent`), what the deploy methods
return (:class:`DeployResult`, :class:`FlowPlan`, :class:`DeployedFlow`, :class:`Revision`,
:class:`RevisionDiff`, :class:`RetireResult`, :class:`CompatProblem`) and the error tree (also
reachable as ``cyclone_flow.errors``). Everything else stays importable from its own
module, without a stability promise.
"""

from cyclone_flow.client import Client, migrate
from cyclone_flow.config import ClientConfig, ClientOptions, PayloadLimits, RetentionConfig
from cyclone_flow.db.rows import (
    DeployedFlow,
    NodeOutput,
    QueueStats,
    Revision,
    Run,
    ScheduleRow,
    Step,
    StepLogLine,
    WorkerRow,
)
from cyclone_flow.deployments import (
    CompatProblem,
    DeployResult,
    FlowPlan,
    RetireResult,
    RevisionDiff,
)
from cyclone_flow.engine.fan_out import MAX_FAN_OUT_ITEMS
from cyclone_flow.errors import (
    AmbiguousRunIdError,
    BatchItemError,
    ClientStateError,
    CompatibilityError,
    ConfigError,
    CycloneError,
    DeployLintError,
    EmbeddedInUseError,
    EmbeddedUnavailableError,
    FlowError,
    FlowNotDeployedError,
    FlowRetiredError,
    HandlerImportError,
    InputValidationError,
    IsolationLevelError,
    LintPathError,
    NodeNotFoundError,
    NoFlowFilesError,
    PayloadTooLargeError,
    PermanentError,
    Problem,
    ReclaimLimitExceeded,
    RerunRefusedError,
    RevisionNotFoundError,
    RunIdTooShortError,
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
from cyclone_flow.flowfile.model import Flow
from cyclone_flow.handlers import AllowList
from cyclone_flow.inserter import RunId
from cyclone_flow.notify import WakeupTracker
from cyclone_flow.options import JobOptions, SubmitOptions
from cyclone_flow.schedules import SyncResult
from cyclone_flow.states import ErrorKind, RunState, StepState
from cyclone_flow.worker.context import Context

__all__ = [
    "MAX_FAN_OUT_ITEMS",
    "AllowList",
    "AmbiguousRunIdError",
    "BatchItemError",
    "Client",
    "ClientConfig",
    "ClientOptions",
    "ClientStateError",
    "CompatProblem",
    "CompatibilityError",
    "ConfigError",
    "Context",
    "CycloneError",
    "DeployLintError",
    "DeployResult",
    "DeployedFlow",
    "EmbeddedInUseError",
    "EmbeddedUnavailableError",
    "ErrorKind",
    "Flow",
    "FlowError",
    "FlowNotDeployedError",
    "FlowPlan",
    "FlowRetiredError",
    "HandlerImportError",
    "InputValidationError",
    "IsolationLevelError",
    "JobOptions",
    "LintPathError",
    "NoFlowFilesError",
    "NodeNotFoundError",
    "NodeOutput",
    "PayloadLimits",
    "PayloadTooLargeError",
    "PermanentError",
    "Problem",
    "QueueStats",
    "ReclaimLimitExceeded",
    "RerunRefusedError",
    "RetentionConfig",
    "RetireResult",
    "Revision",
    "RevisionDiff",
    "RevisionNotFoundError",
    "Run",
    "RunId",
    "RunIdTooShortError",
    "RunNotFoundError",
    "RunState",
    "RunStateError",
    "ScheduleNotFoundError",
    "ScheduleRow",
    "SchemaOutdatedError",
    "SignalRejectedError",
    "Step",
    "StepEvent",
    "StepLogLine",
    "StepState",
    "StepTimeoutError",
    "SubmitOptionError",
    "SubmitOptions",
    "SyncResult",
    "TemplateError",
    "TransactionOpenError",
    "WaitTimeoutError",
    "WakeupTracker",
    "WorkerRow",
    "load_flow",
    "migrate",
]
