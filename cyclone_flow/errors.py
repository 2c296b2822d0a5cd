"""The cyclone-flow error tree.

Every error the API raises on purpose derives from :class:`CycloneError`. Each class
carries the data a caller needs (run id, node, size, limit, problems) and the exit code
the CLI uses for it: 1 for a problem with the input or the database state, 2 for a usage
mistake. A stale compare-and-swap is never an error (Engine Design: CAS State
Transitions): the engine's and ``cyclone_flow.db``'s functions return ``None`` or ``False``
for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cyclone_flow.text import printable

_SHOWN_CHARS = 200
_MESSAGE_CHARS = 2000


def shown(value: object) -> str:
    """``repr(value)`` for a message: cut after 200 characters, and never raising (an int
    of more than 4300 digits has no repr)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"<{type(value).__name__} too large to show>"
    if len(text) > _SHOWN_CHARS:
        return f"{text[:_SHOWN_CHARS]}... ({len(text) - _SHOWN_CHARS} more characters)"
    return text


class CycloneError(Exception):
    """Base class of every error cyclone-flow raises on purpose."""

    exit_code: int = 1


class ConfigError(CycloneError, ValueError):
    """An invalid option value, raised at construction, never at first use (Client Options)."""

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    """One lint problem: where it is (1-based line and column), a stable code, a message.
    A code starting with ``W`` is a warning (:attr:`severity`): reported, but the flow
    loads and runs; every other code is an error.

    ``str(problem)`` is ``FILE:LINE:COL: error[CODE]: message`` (``warning[CODE]``). NUL
    characters and lone surrogates in ``message`` are spelled out (``\\x00``, ``\\ud800``),
    and a message over 2000 characters (quoting a huge value) keeps its first and last
    1000.
    """

    path: str
    line: int
    col: int
    code: str
    message: str

    def __post_init__(self) -> None:
        # a message quoting hostile flow text must stay printable (and storable): NUL
        # characters and lone surrogates are spelled out
        message = printable(self.message) or ""
        if len(message) > _MESSAGE_CHARS:  # it quotes a huge value: keep both ends
            half = _MESSAGE_CHARS // 2
            cut = len(message) - 2 * half
            message = f"{message[:half]} ... ({cut} characters cut) ... {message[-half:]}"
        object.__setattr__(self, "message", message)

    @property
    def severity(self) -> str:
        """``"warning"`` for a ``W`` code, else ``"error"``."""
        return "warning" if self.code.startswith("W") else "error"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.severity}[{self.code}]: {self.message}"


class FlowError(CycloneError):
    """A flow file that cannot be loaded: carries every :class:`Problem` found."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems) or "invalid flow")


class InputValidationError(CycloneError):
    """A run input that does not match the flow's ``input_schema``, or a signal's name or
    payload that cannot be sent; nothing was written.

    ``flow`` names the flow (``""`` for a signal), ``path`` the JSON path of the bad part
    of the input, ``subject`` what is invalid when it is not a run input (``"payload of
    signal 'go'"``): the message then starts with it instead of "input of flow ...";
    ``reason`` is the validation message alone.
    """

    def __init__(
        self, flow: str, message: str, path: str = "", *, subject: str | None = None
    ) -> None:
        self.flow = flow
        self.path = path
        self.subject = subject
        self.reason = message
        where = f" at {path}" if path else ""
        if subject is None:
            super().__init__(f"input of flow {flow!r} is invalid{where}: {message}")
        else:
            super().__init__(f"{subject}{where}: {message}")


class SchemaOutdatedError(CycloneError):
    """The database schema is older than this code; run ``cyclone-flow migrate`` (the
    message adds ``--schema NAME`` for a schema other than ``public``).

    ``found`` is the highest applied version, ``needed`` the highest shipped one, and
    ``missing`` every shipped version not applied (it can name one below ``found``: a
    schema migrated by a build that did not ship that migration). ``command`` replaces
    the migrate command the message names (the CLI's worker adds its database URL)."""

    def __init__(
        self,
        schema: str,
        found: int,
        needed: int,
        missing: tuple[int, ...] = (),
        *,
        command: str | None = None,
    ) -> None:
        self.schema = schema
        self.found = found
        self.needed = needed
        self.missing = missing
        lacks = (
            f" (missing migration{'s' if len(missing) > 1 else ''} "
            f"{', '.join(f'{v:04d}' for v in missing)})"
            if missing and found >= needed
            else " (never migrated)"
            if found == 0
            else ""
        )
        if command is None:
            command = "cyclone-flow migrate" + (f" --schema {schema}" if schema != "public" else "")
        super().__init__(
            f"database schema {schema!r} is at version {found}{lacks}, this cyclone-flow "
            f"needs version {needed}: run `{command}` first"
        )


class RunNotFoundError(CycloneError):
    """No run with this id exists (in the client's schema)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        # a run id as given (10,000 characters of it, a newline): quoted and shortened
        plain = len(run_id) <= _SHOWN_CHARS and run_id.isprintable()
        shown_id = run_id if plain else shown(run_id)
        super().__init__(f"run {shown_id} not found")


class NodeNotFoundError(CycloneError):
    """A run has no node ``node`` (``item`` None), or node ``node`` has no item ``item``
    (it is no fan-out node, or the index is past its items): a usage mistake (exit 2)."""

    exit_code = 2

    def __init__(self, run_id: str, node: str, message: str, item: int | None = None) -> None:
        self.run_id = run_id
        self.node = node
        self.item = item
        super().__init__(message)


class RunIdTooShortError(RunNotFoundError):
    """A run id given as too few hex digits to look up (fewer than ``min_digits``, the
    shortest start of an id :meth:`Client.resolve_run_id` takes). ``run_id`` is the text
    given. A :class:`RunNotFoundError`, so code catching that catches it too."""

    def __init__(self, run_id: str, min_digits: int) -> None:
        super().__init__(run_id)
        self.min_digits = min_digits
        self.args = (
            f"run id {run_id!r} is too short: give at least {min_digits} hex digits of it "
            "(or the whole id)",
        )


class AmbiguousRunIdError(CycloneError):
    """A short run id (a prefix of hex digits) starts the ids of several runs.

    ``prefix`` is the text given; ``matches`` the first matching run ids (lowest first,
    at most ten); ``more`` is True when further runs match."""

    def __init__(self, prefix: str, matches: Sequence[str], more: bool = False) -> None:
        self.prefix = prefix
        self.matches = list(matches)
        self.more = more
        listed = ", ".join(self.matches) + (", ..." if more else "")
        count = f"more than {len(self.matches)}" if more else str(len(self.matches))
        super().__init__(
            f"run id {prefix!r} is ambiguous: it starts {count} run ids ({listed}); "
            "give more of the id"
        )


class PayloadTooLargeError(CycloneError):
    """A payload exceeds its limit; raised before any write (Client Options: WithPayloadLimits).

    ``kind`` is ``input``, ``output`` or ``signal``; ``size`` and ``limit`` are bytes of
    encoded JSON.
    """

    def __init__(self, kind: str, size: int, limit: int) -> None:
        self.kind = kind
        self.size = size
        self.limit = limit
        super().__init__(f"{kind} payload is {size} bytes, over the limit of {limit} bytes")


class BatchItemError(CycloneError):
    """One item of a bulk submission (``Client.submit_many`` / ``enqueue_many`` and their
    ``_tx`` forms) is invalid: ``index`` is its position in the inputs (0-based, across
    chunks), ``error`` the error a single submission would raise for it
    (:class:`InputValidationError`, :class:`PayloadTooLargeError` or
    :class:`SubmitOptionError`; also its ``__cause__``). Nothing of that item's chunk was
    written; earlier chunks of the non-``_tx`` forms stay committed (``committed`` says how
    many runs they hold)."""

    def __init__(self, index: int, error: CycloneError, committed: int = 0) -> None:
        self.index = index
        self.error = error
        self.committed = committed
        self.exit_code = error.exit_code
        super().__init__(f"item {index}: {error}")


class TemplateError(CycloneError):
    """A ``${{ ... }}`` reference that cannot be resolved against the run's data."""


class PermanentError(CycloneError):
    """Raise from a handler to discard its step at once, without further attempts."""


class RunStateError(CycloneError):
    """The run is in a state the operation does not accept (e.g. retry of a running run)."""

    def __init__(self, run_id: str, state: str, message: str) -> None:
        self.run_id = run_id
        self.state = state
        super().__init__(f"run {run_id} is {state}: {message}")


class RerunRefusedError(RunStateError):
    """A rerun that cannot reuse what it should (``Client.rerun``): ``nodes`` are the
    nodes that stop it (an upstream node that did not complete, or whose input a changed
    run input would change); nothing was written."""

    def __init__(self, run_id: str, state: str, message: str, nodes: tuple[str, ...]) -> None:
        self.nodes = nodes
        super().__init__(run_id, state, message)


class ReclaimLimitExceeded(CycloneError):
    """Given to ``error_handler`` when the sweep discards a step whose lease expired after
    ``max_reclaims`` reclaims (Client Options: WithMaxReclaims; error_kind reclaim_limit)."""

    def __init__(self, run_id: str, node: str, max_reclaims: int) -> None:
        self.run_id = run_id
        self.node = node
        self.max_reclaims = max_reclaims
        super().__init__(
            f"step {node} of run {run_id}: lease expired after {max_reclaims} reclaims"
        )


class StepTimeoutError(CycloneError):
    """Given to ``error_handler`` when the sweep fails an attempt that passed
    ``started_at + timeout`` (error_kind timeout)."""

    def __init__(self, run_id: str, node: str) -> None:
        self.run_id = run_id
        self.node = node
        super().__init__(f"step {node} of run {run_id} timed out")


class IsolationLevelError(CycloneError):
    """Given to ``error_handler`` when a handler changed the isolation of its completion
    transaction, or the session's default through ``SET SESSION CHARACTERISTICS`` / ``SET
    default_transaction_isolation``: the engine's transactions must run under READ
    COMMITTED, so nothing of the transaction committed and the step failed permanently
    (error_kind handler_error)."""

    def __init__(self, run_id: str, node: str, isolation: str) -> None:
        self.run_id = run_id
        self.node = node
        self.isolation = isolation
        super().__init__(
            f"step {node} of run {run_id}: the handler changed the isolation of its "
            f"completion transaction ({isolation}); ctx.completion_tx() must stay READ "
            "COMMITTED, so nothing of it committed"
        )


class SignalRejectedError(CycloneError):
    """A signal that no node of the run can consume: no ``wait_signal`` node of the run
    waits (or will wait) for ``name``, or every such node has a signal kept already.
    Nothing was written. (An unknown run raises :class:`RunNotFoundError`, a finished one
    :class:`RunStateError`.)"""

    def __init__(self, run_id: str, name: str, reason: str) -> None:
        self.run_id = run_id
        self.name = name
        self.reason = reason
        super().__init__(f"signal {name!r} for run {run_id} rejected: {reason}")


class SubmitOptionError(ConfigError):
    """An invalid option of one submission (``submit``, ``enqueue``, their ``_tx`` and
    ``_completion`` forms, or a schedule): a bad queue name, priority, ``run_at``/``delay``,
    unique or sequence option, callable, retry or timeout. Raised before anything is
    written (seeds: Queues and Priority, Unique Jobs, Sequences).

    ``option`` names the offending keyword, ``value`` is what was given.
    """

    def __init__(self, option: str, value: object, message: str) -> None:
        self.option = option
        self.value = value
        super().__init__(f"{option}={shown(value)}: {message}")


class ScheduleNotFoundError(CycloneError):
    """No cron schedule with this name exists (in the client's schema)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"schedule {name!r} not found")


class WaitTimeoutError(CycloneError, TimeoutError):
    """``Client.wait`` gave up: the run was still not terminal after ``timeout`` seconds.

    ``state`` is the run's state at the last check (``running``); the run goes on.
    """

    def __init__(self, run_id: str, timeout: float, state: str) -> None:
        self.run_id = run_id
        self.timeout = timeout
        self.state = state
        super().__init__(f"run {run_id} is still {state} after waiting {timeout:g} s")


class TransactionOpenError(CycloneError):
    """``Client.publish_wakeups(conn)`` was called while ``conn`` is still inside a
    transaction: commit first, then publish (a wakeup sent before the commit wakes workers
    that cannot see the work yet). Nothing was published; the wakeups stay recorded."""

    exit_code = 2

    def __init__(self, status: str) -> None:
        self.status = status
        super().__init__(
            f"publish_wakeups: the connection's transaction is still open ({status}); "
            "commit (or roll back and discard) before publishing its wakeups"
        )


class ClientStateError(CycloneError):
    """A :class:`~cyclone_flow.Client` method called at the wrong time in the client's
    life, e.g. ``observe_steps`` after ``start``. ``method`` names the method. A usage
    mistake (exit code 2)."""

    exit_code = 2

    def __init__(self, method: str, message: str) -> None:
        self.method = method
        super().__init__(f"{method}: {message}")


class HandlerImportError(CycloneError):
    """A ``call`` that is not allowed, does not import, or is not callable.

    ``reason`` says which: ``"form"`` (not ``package.module:function``), ``"private"``
    (a part of the attribute path starts with ``_``), ``"module"`` (the module is not
    allowed), ``"import"`` (importing it failed), ``"attribute"`` (no such attribute),
    ``"foreign"`` (the path reaches an object not defined in an allowed module, or a
    module), ``"not_callable"``, ``"signature"`` (not callable as ``handler(ctx, input)``,
    or an async generator function); ``"async"`` is retired (``async def`` handlers run
    since issue 30.6: never raised now).
    """

    def __init__(self, message: str, reason: str = "import") -> None:
        super().__init__(message)
        self.reason = reason


class LintPathError(CycloneError, FileNotFoundError):
    """A path given to lint does not exist; the CLI reports it as a usage error (exit 2)."""

    exit_code = 2

    def __init__(self, path: str, message: str | None = None) -> None:
        self.path = path
        super().__init__(message or f"path does not exist: {path}")


class NoFlowFilesError(LintPathError):
    """A folder given to lint holds no ``*.yaml`` / ``*.yml`` file: linting it would check
    nothing, so it is a usage error (exit 2) rather than a silent pass."""

    def __init__(self, path: str) -> None:
        super().__init__(path, f"no flow files (*.yaml, *.yml) found in {path}")


class EmbeddedUnavailableError(CycloneError):
    """The embedded Postgres cannot be used (package missing or server failed to start)."""

    exit_code = 2


class EmbeddedInUseError(CycloneError):
    """``embedded stop`` without ``--force`` while live processes use the embedded server:
    they would lose their connections (``pids``, the live users; ``data_dir``)."""

    def __init__(self, data_dir: object, pids: tuple[int, ...]) -> None:
        self.data_dir = data_dir
        self.pids = pids
        listed = ", ".join(map(str, pids))
        super().__init__(
            f"the embedded Postgres in {data_dir} is in use by cyclone-flow process(es) "
            f"{listed}: stop them first, or give --force (they lose their connections)"
        )


class DeployLintError(FlowError):
    """``deploy`` / ``diff`` refused the flow files: ``problems`` holds every lint error
    (and warning) found, and E060 when two files declare one flow name. Nothing was
    written (exit 1)."""


class CompatibilityError(CycloneError):
    """A deploy or rollback whose new ``input_schema`` refuses a stored input that will
    use it: a schedule's input, or the input of a run of the flow waiting to start.
    ``problems`` are the :class:`~cyclone_flow.deployments.CompatProblem` found (each
    names its schedule or run), ``result`` the
    :class:`~cyclone_flow.deployments.DeployResult` (or, for a rollback, the
    :class:`~cyclone_flow.deployments.FlowPlan`) that was not applied. Nothing was
    written; ``force`` deploys anyway (exit 1). Both are typed ``Any``: this module is the
    lowest layer and cannot import :mod:`cyclone_flow.deployments`."""

    def __init__(self, problems: Sequence[Any], result: Any) -> None:
        self.problems = tuple(problems)
        self.result = result
        lines = [f"{p.kind} {p.name}: {p.message}" for p in self.problems]
        super().__init__(
            "the new input_schema refuses stored inputs that would use it (force to deploy "
            "anyway):\n" + "\n".join(lines)
        )


class FlowNotDeployedError(CycloneError):
    """No flow of this ``name`` was ever deployed (``deploy`` it first); exit 1."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"flow {shown(name)} is not deployed")


class RevisionNotFoundError(CycloneError):
    """The deployed flow ``name`` has no revision ``revision``; exit 1."""

    def __init__(self, name: str, revision: int) -> None:
        self.name = name
        self.revision = revision
        super().__init__(f"flow {shown(name)} has no revision {revision}")


class FlowRetiredError(CycloneError):
    """The deployed flow ``name`` is retired: submits by name are refused until it is
    deployed (or rolled back) again; exit 1."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"flow {shown(name)} is retired: deploy it again (or roll it back) to submit it"
        )
