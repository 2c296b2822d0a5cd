"""Compare two versions of a flow: what changed node by node, in the schedules and in the
input schema, and whether the new ``input_schema`` can reject inputs the old accepted.

Pure: the inputs are flow documents as stored (:attr:`Flow.document`, plain JSON data,
defaults NOT applied), the results plain frozen data. ``cyclone-flow deploy`` / ``diff``
and ``flows diff`` show them.

Values are JSON data throughout: durations are float seconds (None when not set), a
retry is ``{"max_attempts": N, "backoff": {"initial": s, "max": s, "multiplier": x,
"jitter": x}}``, a limit ``{"group": G, "limit": N, "key": K, "per": s}``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cyclone_flow.durations import format_duration, parse_duration
from cyclone_flow.flowfile.build import build_flow, document_digest
from cyclone_flow.flowfile.model import JSON, Flow, Limit, Node, Retry
from cyclone_flow.names import schedule_default_name

__all__ = [
    "FLOW_FIELDS",
    "NODE_FIELDS",
    "FieldChange",
    "FlowChange",
    "NodeChange",
    "NodeSummary",
    "ScheduleChange",
    "SchemaChange",
    "compare_documents",
    "describe_change",
    "schema_changes",
    "source_diff",
]

Status = Literal["added", "removed", "changed", "unchanged"]
Change = Literal["added", "removed", "changed"]

NODE_FIELDS = (
    "type",
    "call",
    "needs",
    "input",
    "when",
    "retry",
    "timeout",
    "queue",
    "priority",
    "on_dep_failure",
    "on_dep_skip",
    "concurrency",
    "rate_limit",
    "import_wait",
    "over",
    "max_parallel",
    "flow",
    "signal",
    "max_wait",
)
"""The fields of a node compared (after ``defaults``), in the order changes are listed."""

FLOW_FIELDS = ("name", "description", "deadline", "import_wait", "input_schema", "defaults")
"""The top-level fields compared first; any other top-level key but ``nodes`` and
``schedules`` follows, sorted."""

_DURATIONS = frozenset(
    {
        "timeout",
        "import_wait",
        "max_wait",
        "deadline",
        "retry.backoff.initial",
        "retry.backoff.max",
        "concurrency.per",
        "rate_limit.per",
    }
)
_FLATTENED = frozenset({"retry", "concurrency", "rate_limit", "defaults"})
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field whose value differs: ``field`` (a name of :data:`NODE_FIELDS` or a
    top-level key), ``old`` and ``new`` (JSON data; durations in seconds)."""

    field: str
    old: JSON
    new: JSON

    def to_json(self) -> dict[str, JSON]:
        """``{"field", "old", "new"}``."""
        return {"field": self.field, "old": self.old, "new": self.new}


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """A node added or removed: its ``name``, ``type`` and ``call`` (None unless an
    ``action`` or ``fan_out``)."""

    name: str
    type: str
    call: str | None

    def to_json(self) -> dict[str, JSON]:
        """``{"name", "type", "call"}``."""
        return {"name": self.name, "type": self.type, "call": self.call}


@dataclass(frozen=True, slots=True)
class NodeChange:
    """A node in both versions whose fields differ: ``fields`` in :data:`NODE_FIELDS`
    order."""

    name: str
    fields: tuple[FieldChange, ...]

    def to_json(self) -> dict[str, JSON]:
        """``{"name", "fields": [FieldChange.to_json(), ...]}``."""
        return {"name": self.name, "fields": [f.to_json() for f in self.fields]}


@dataclass(frozen=True, slots=True)
class ScheduleChange:
    """A schedule (by name; an unnamed one by its default name,
    :func:`cyclone_flow.names.schedule_default_name`) added, removed or changed.
    ``old`` / ``new`` are ``{"cron", "timezone", "input"}`` (timezone defaulted to UTC),
    None on the side where it is absent."""

    name: str
    change: Change
    old: Mapping[str, JSON] | None
    new: Mapping[str, JSON] | None

    def to_json(self) -> dict[str, JSON]:
        """``{"name", "change", "old", "new"}``."""
        return {
            "name": self.name,
            "change": self.change,
            "old": None if self.old is None else dict(self.old),
            "new": None if self.new is None else dict(self.new),
        }


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """One difference between two ``input_schema`` versions.

    ``path`` is the property's dotted path (``""``: the schema itself); ``kind`` one of
    ``schema_added``, ``schema_removed``, ``required_added``, ``required_removed``,
    ``property_added``, ``property_removed``, ``type_changed``, ``enum_changed``,
    ``default_added``, ``default_removed``, ``default_changed``, ``closed`` (now
    ``additionalProperties: false``), ``opened``, and for any other validation keyword
    (``pattern``, ``minimum``, ``format``, ``$ref``, ...) ``constraint_added``,
    ``constraint_removed``, ``constraint_tightened``, ``constraint_loosened`` (a numeric
    bound moved) or ``constraint_changed``. The items of an array are at ``PATH[]``.
    ``breaking`` is True when an input the old schema accepted may now be rejected (any
    change not known to widen); ``message`` says it in words.
    """

    path: str
    kind: str
    breaking: bool
    message: str

    def to_json(self) -> dict[str, JSON]:
        """``{"path", "kind", "breaking", "message"}``."""
        return {
            "path": self.path,
            "kind": self.kind,
            "breaking": self.breaking,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class FlowChange:
    """What changed between two versions of a flow (:func:`compare_documents`).

    ``status``: ``added`` (no old version), ``removed`` (no new one), ``changed`` or
    ``unchanged`` (equal documents). An added flow lists all its nodes in
    ``nodes_added`` and its schedules as added, a removed one likewise as removed;
    ``flow_fields`` and ``schema`` are then empty. ``nodes_added`` is in the new file's
    order, ``nodes_removed`` in the old's, ``nodes_changed`` in the new's.
    """

    name: str
    status: Status
    nodes_added: tuple[NodeSummary, ...] = ()
    nodes_removed: tuple[NodeSummary, ...] = ()
    nodes_changed: tuple[NodeChange, ...] = ()
    flow_fields: tuple[FieldChange, ...] = ()
    schedules: tuple[ScheduleChange, ...] = ()
    schema: tuple[SchemaChange, ...] = ()

    @property
    def breaking(self) -> bool:
        """Whether a change of the input schema may reject inputs the old one accepted."""
        return any(c.breaking for c in self.schema)

    def to_json(self) -> dict[str, JSON]:
        """The change as plain JSON data (the ``--json`` contract of ``diff``)::

        {"name": str, "status": "added"|"removed"|"changed"|"unchanged",
         "breaking": bool,
         "nodes_added": [{"name", "type", "call"}],
         "nodes_removed": [{"name", "type", "call"}],
         "nodes_changed": [{"name", "fields": [{"field", "old", "new"}]}],
         "flow_fields": [{"field", "old", "new"}],
         "schedules": [{"name", "change", "old", "new"}],
         "schema": [{"path", "kind", "breaking", "message"}]}
        """
        return {
            "name": self.name,
            "status": self.status,
            "breaking": self.breaking,
            "nodes_added": [n.to_json() for n in self.nodes_added],
            "nodes_removed": [n.to_json() for n in self.nodes_removed],
            "nodes_changed": [n.to_json() for n in self.nodes_changed],
            "flow_fields": [f.to_json() for f in self.flow_fields],
            "schedules": [s.to_json() for s in self.schedules],
            "schema": [s.to_json() for s in self.schema],
        }


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (``true`` is not ``1``, ``1`` is not ``1.0``)."""
    return a is b or _canonical(a) == _canonical(b)


def _retry_json(retry: Retry) -> dict[str, JSON]:
    b = retry.backoff
    return {
        "max_attempts": retry.max_attempts,
        "backoff": {
            "initial": b.initial_s,
            "max": b.max_s,
            "multiplier": b.multiplier,
            "jitter": b.jitter,
        },
    }


def _limit_json(limit: Limit | None) -> dict[str, JSON] | None:
    if limit is None:
        return None
    path = "".join(f".{p}" for p in limit.key_path or ())
    if limit.key_node is not None:
        key: str | None = f"${{{{ nodes.{limit.key_node}.output{path} }}}}"
    elif limit.key_path is not None:
        key = f"${{{{ run.input{path} }}}}"
    else:
        key = limit.key_value
    return {"group": limit.group, "limit": limit.limit, "key": key, "per": limit.per_s}


def _node_fields(node: Node) -> dict[str, JSON]:
    return {
        "type": node.type,
        "call": node.call,
        "needs": list(node.needs),
        "input": node.input,
        "when": node.when,
        "retry": _retry_json(node.retry),
        "timeout": node.timeout_s,
        "queue": node.queue,
        "priority": node.priority,
        "on_dep_failure": node.on_dep_failure,
        "on_dep_skip": node.on_dep_skip,
        "concurrency": _limit_json(node.concurrency),
        "rate_limit": _limit_json(node.rate_limit),
        "import_wait": node.import_wait_s,
        "over": node.options.get("over"),
        "max_parallel": node.options.get("max_parallel"),
        "flow": node.options.get("flow"),
        "signal": node.options.get("signal"),
        "max_wait": node.max_wait_s,
    }


def _summary(node: Node) -> NodeSummary:
    return NodeSummary(node.name, node.type, node.call)


def _flow_fields(flow: Flow) -> dict[str, JSON]:
    doc = flow.document
    import_wait = doc.get("import_wait")
    out: dict[str, JSON] = {
        "name": flow.name,
        "description": flow.description,
        "deadline": flow.deadline_s,
        "import_wait": None if import_wait is None else parse_duration(import_wait),
        "input_schema": flow.input_schema,
        "defaults": doc.get("defaults"),
    }
    for key in sorted(doc):
        if key not in out and key not in ("nodes", "schedules"):
            out[key] = doc[key]
    return out


def _schedules(flow: Flow) -> dict[str, dict[str, JSON]]:
    """The flow's schedules by name (unnamed ones by their default name), in file order."""
    out: dict[str, dict[str, JSON]] = {}
    for entry in flow.document.get("schedules") or []:
        cron, timezone, input = entry["cron"], entry.get("timezone", "UTC"), entry.get("input")
        name = entry.get("name") or schedule_default_name(flow.name, cron, timezone, input)
        out[name] = {"cron": cron, "timezone": timezone, "input": input}
    return out


def _schedule_changes(old: Flow | None, new: Flow | None) -> tuple[ScheduleChange, ...]:
    before = _schedules(old) if old is not None else {}
    after = _schedules(new) if new is not None else {}
    out: list[ScheduleChange] = []
    for name, spec in after.items():
        was = before.get(name)
        if was is None:
            out.append(ScheduleChange(name, "added", None, spec))
        elif not _same(was, spec):
            out.append(ScheduleChange(name, "changed", was, spec))
    out.extend(
        ScheduleChange(name, "removed", spec, None)
        for name, spec in before.items()
        if name not in after
    )
    return tuple(out)


def _field_changes(old: Mapping[str, JSON], new: Mapping[str, JSON]) -> tuple[FieldChange, ...]:
    return tuple(
        FieldChange(key, old.get(key), new.get(key))
        for key in dict.fromkeys([*old, *new])
        if not _same(old.get(key), new.get(key))
    )


def compare_documents(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> FlowChange:
    """Compare two versions of a flow document (:attr:`Flow.document`; None: absent).

    Nodes are compared after ``defaults`` (a change of ``defaults.retry`` shows on every
    node that inherits it), over :data:`NODE_FIELDS`; the ``schedules`` by name; the
    top-level fields over :data:`FLOW_FIELDS` and any other key; the input schemas with
    :func:`schema_changes`. ``name`` is the new version's (the old's when removed).

    The documents must be valid flows (as stored); child flows are not loaded.

    Raises
    ------
    ValueError
        When both are None.
    """
    if old is None and new is None:
        raise ValueError("compare_documents: both versions are None")
    before = None if old is None else build_flow(old)
    after = None if new is None else build_flow(new)
    if after is None:
        assert before is not None
        return FlowChange(
            name=before.name,
            status="removed",
            nodes_removed=tuple(_summary(n) for n in before.nodes.values()),
            schedules=_schedule_changes(before, None),
        )
    if before is None:
        return FlowChange(
            name=after.name,
            status="added",
            nodes_added=tuple(_summary(n) for n in after.nodes.values()),
            schedules=_schedule_changes(None, after),
        )
    if document_digest(before.document) == document_digest(after.document):
        return FlowChange(name=after.name, status="unchanged")
    changed: list[NodeChange] = []
    for name, node in after.nodes.items():
        was = before.nodes.get(name)
        if was is not None:
            fields = _field_changes(_node_fields(was), _node_fields(node))
            if fields:
                changed.append(NodeChange(name, fields))
    return FlowChange(
        name=after.name,
        status="changed",
        nodes_added=tuple(_summary(n) for n in after.nodes.values() if n.name not in before.nodes),
        nodes_removed=tuple(
            _summary(n) for n in before.nodes.values() if n.name not in after.nodes
        ),
        nodes_changed=tuple(changed),
        flow_fields=_field_changes(_flow_fields(before), _flow_fields(after)),
        schedules=_schedule_changes(before, after),
        schema=tuple(schema_changes(before.input_schema, after.input_schema)),
    )


# --- input schema compatibility ---------------------------------------------------------

_CONSTRAINTS = ("$ref", "$dynamicRef", "anyOf", "oneOf", "allOf", "not", "if", "enum", "const")
"""Keywords that constrain a schema without ``type``: a missing ``type`` then does not
mean "anything"."""

_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
        "$schema",
    }
)
"""Keywords that refuse no input (annotations in JSON Schema 2020-12, the dialect inputs
are validated with, whatever ``$schema`` says): their changes are not schema changes."""

_HANDLED = frozenset(
    {"type", "enum", "required", "properties", "additionalProperties", "default", "items"}
)
"""Keywords :func:`_compare_schema` compares on their own; the others go to
:func:`_keyword_changes`."""

_LOWER_BOUNDS = frozenset(
    {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"}
)
"""Numeric keywords that refuse more inputs the higher they are."""

_UPPER_BOUNDS = frozenset(
    {"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"}
)
"""Numeric keywords that refuse more inputs the lower they are."""

_MAY_REFUSE = "(may refuse inputs the old schema accepted)"


def _types(schema: Mapping[str, Any]) -> frozenset[str] | None:
    kind = schema.get("type")
    if isinstance(kind, str):
        return frozenset([kind])
    if isinstance(kind, list):
        return frozenset(k for k in kind if isinstance(k, str))
    return None


def _show_types(types: frozenset[str]) -> str:
    return " | ".join(sorted(types))


def _widens(old: frozenset[str], new: frozenset[str]) -> bool:
    """Whether every value of the ``old`` types is one of the ``new`` types."""
    return all(t in new or (t == "integer" and "number" in new) for t in old)


def _is_type(value: Any, kind: str) -> bool:
    """Whether the JSON ``value`` is of the JSON Schema type ``kind``."""
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    checks: dict[str, type | tuple[type, ...]] = {
        "number": (int, float),
        "string": str,
        "array": list,
        "object": Mapping,
    }
    wanted = checks.get(kind)
    return wanted is not None and isinstance(value, wanted)


def _listed_values(schema: Mapping[str, Any]) -> list[Any] | None:
    """The only values ``schema`` accepts by its ``enum`` / ``const`` (None: not so
    restricted)."""
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    return list(enum) if isinstance(enum, list) else None


def _what(path: str) -> str:
    return f"field {path!r}" if path else "the input"


def _type_change(path: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[SchemaChange]:
    before, after = _types(old), _types(new)
    if before == after:
        return []
    if before is None:
        assert after is not None
        listed = _listed_values(old)
        if listed is not None and all(any(_is_type(v, t) for t in after) for v in listed):
            return []  # every value the old enum / const allows is of the new type
        was = "no type was set" if any(k in old for k in _CONSTRAINTS) else "was any type"
        return [
            SchemaChange(
                path,
                "type_changed",
                True,
                f"{_what(path)} must now be {_show_types(after)} ({was})",
            )
        ]
    if after is None:
        if any(k in new for k in _CONSTRAINTS):
            message = f"type of {_what(path)} no longer set (was {_show_types(before)})"
        else:
            message = f"{_what(path)} may now be any type"
        return [SchemaChange(path, "type_changed", False, message)]
    widened = _widens(before, after)
    return [
        SchemaChange(
            path,
            "type_changed",
            not widened,
            f"type of {_what(path)} {'widened' if widened else 'changed'}: "
            f"{_show_types(before)} -> {_show_types(after)}",
        )
    ]


def _enum_change(path: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[SchemaChange]:
    after = new.get("enum")
    if not isinstance(after, list):
        if isinstance(old.get("enum"), list) and "enum" not in new:
            return [
                SchemaChange(
                    path, "enum_changed", False, f"{_what(path)} is no longer limited to a list"
                )
            ]
        return []
    before = old.get("enum")
    if not isinstance(before, list):
        if "const" in old:
            before = [old["const"]]
        else:
            return [
                SchemaChange(path, "enum_changed", True, f"{_what(path)} now only accepts {after}")
            ]
    allowed = {_canonical(v) for v in after}
    dropped = [v for v in before if _canonical(v) not in allowed]
    if not dropped and len(before) == len(after):
        return []
    if dropped:
        return [
            SchemaChange(
                path,
                "enum_changed",
                True,
                f"{_what(path)} no longer accepts {', '.join(_show(v) for v in dropped)}",
            )
        ]
    return [SchemaChange(path, "enum_changed", False, f"{_what(path)} accepts more values")]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bound_change(path: str, key: str, before: Any, after: Any) -> SchemaChange | None:
    """A numeric bound (:data:`_LOWER_BOUNDS`, :data:`_UPPER_BOUNDS`) changed, both sides
    numbers: tightened (breaking) or loosened; None when not both numbers."""
    if not (_is_number(before) and _is_number(after)):
        return None
    lower = key in _LOWER_BOUNDS
    tighter = after > before if lower else after < before
    verb = ("raised" if after > before else "lowered") if after != before else "changed"
    text = f"{_what(path)}: {key} {verb}: {_show(before)} -> {_show(after)}"
    if tighter:
        return SchemaChange(path, "constraint_tightened", True, f"{text} {_MAY_REFUSE}")
    return SchemaChange(path, "constraint_loosened", False, text)


def _removal_widens(key: str, new: Mapping[str, Any]) -> bool:
    """Whether dropping the keyword ``key`` (the rest of the schema being ``new``) can only
    accept more inputs. Dropping ``patternProperties`` leaves the matching fields to
    ``additionalProperties``, dropping ``prefixItems`` leaves the first items to ``items``;
    dropping ``$defs`` breaks the ``$ref`` that use them."""
    if key in ("$defs", "definitions", "$id", "$anchor", "$dynamicAnchor"):
        return False
    if key == "patternProperties":
        return not _restricts_others(new)
    if key == "prefixItems":
        return new.get("items", True) is True and new.get("unevaluatedItems", True) is True
    return True


def _restricts_others(schema: Mapping[str, Any]) -> bool:
    """Whether fields not in ``properties`` are constrained (``additionalProperties`` or
    ``unevaluatedProperties`` set to anything but true)."""
    return (
        schema.get("additionalProperties", True) is not True
        or schema.get("unevaluatedProperties", True) is not True
    )


def _keyword_changes(
    path: str, old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[SchemaChange]:
    """The changes of the keywords :func:`_compare_schema` does not compare on its own
    (``pattern``, ``minimum``, ``format``, ``const``, ``anyOf``, ``$ref``, ...): a keyword
    added, or changed in a way not known to widen, may refuse inputs (breaking); removed,
    or a bound loosened, does not. Annotations (:data:`_ANNOTATIONS`) are left out."""
    out: list[SchemaChange] = []
    keys = [k for k in dict.fromkeys([*old, *new]) if k not in _HANDLED and k not in _ANNOTATIONS]
    for key in keys:
        before, after = old.get(key, _MISSING), new.get(key, _MISSING)
        if before is not _MISSING and after is not _MISSING and _same(before, after):
            continue
        if key == "uniqueItems":
            if after is True:
                out.append(
                    SchemaChange(
                        path,
                        "constraint_added",
                        True,
                        f"{_what(path)}: uniqueItems added {_MAY_REFUSE}",
                    )
                )
            elif before is True:
                out.append(
                    SchemaChange(
                        path, "constraint_removed", False, f"{_what(path)}: uniqueItems removed"
                    )
                )
            continue
        if after is _MISSING:
            if key == "const" and "enum" in new:
                continue  # the enum change says it
            widens = _removal_widens(key, new)
            text = f"{_what(path)}: {key} removed (was {_show(before)})"
            out.append(
                SchemaChange(
                    path,
                    "constraint_removed",
                    not widens,
                    text if widens else f"{text} {_MAY_REFUSE}",
                )
            )
            continue
        if before is _MISSING:
            out.append(
                SchemaChange(
                    path,
                    "constraint_added",
                    True,
                    f"{_what(path)}: {key} added: {_show(after)} {_MAY_REFUSE}",
                )
            )
            continue
        if key in _LOWER_BOUNDS or key in _UPPER_BOUNDS:
            bound = _bound_change(path, key, before, after)
            if bound is not None:
                out.append(bound)
                continue
        out.append(
            SchemaChange(
                path,
                "constraint_changed",
                True,
                f"{_what(path)}: {key} changed: {_show(before)} -> {_show(after)} {_MAY_REFUSE}",
            )
        )
    return out


def _additional_change(
    path: str, old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[SchemaChange]:
    """``additionalProperties``: newly false (``closed``, breaking), no longer false
    (``opened``), or another change of its schema (breaking unless it became true or
    absent)."""
    before = old.get("additionalProperties", True)
    after = new.get("additionalProperties", True)
    if before is False and after is not False:
        return [SchemaChange(path, "opened", False, "other fields are now accepted")]
    if after is False and before is not False:
        return [
            SchemaChange(
                path,
                "closed",
                True,
                f"additionalProperties is now false{' in ' + repr(path) if path else ''}: "
                "inputs with other fields are rejected",
            )
        ]
    if _same(before, after):
        return []
    if after is True:
        return [
            SchemaChange(
                path,
                "constraint_removed",
                False,
                f"{_what(path)}: additionalProperties removed (was {_show(before)})",
            )
        ]
    verb = "added" if before is True else "changed"
    return [
        SchemaChange(
            path,
            "constraint_added" if before is True else "constraint_changed",
            True,
            f"{_what(path)}: additionalProperties {verb}: {_show(after)} {_MAY_REFUSE}",
        )
    ]


def _required(schema: Mapping[str, Any]) -> list[str]:
    req = schema.get("required")
    return [r for r in req if isinstance(r, str)] if isinstance(req, list) else []


def _properties(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    props = schema.get("properties")
    return props if isinstance(props, Mapping) else {}


def _default_of(schema: Mapping[str, Any], key: str) -> Any:
    prop = _properties(schema).get(key)
    return prop.get("default", _MISSING) if isinstance(prop, Mapping) else _MISSING


def _validates(schema: Any) -> bool:
    """Whether the subschema ``schema`` can refuse a value: not ``true`` nor a mapping of
    annotations and ``default`` only."""
    if schema is True:
        return False
    if not isinstance(schema, Mapping):
        return True
    return any(k not in _ANNOTATIONS and k != "default" for k in schema)


def _as_schema(value: Any) -> Mapping[str, Any] | None:
    """A subschema as a mapping: ``true`` (or absent) is ``{}``; None for ``false`` or
    anything that is no schema."""
    if value is True or value is _MISSING:
        return {}
    return value if isinstance(value, Mapping) else None


def _subschema_changes(path: str, old: Any, new: Any) -> list[SchemaChange]:
    """Changes of a property's or the items' subschema (a mapping or a boolean)."""
    before, after = _as_schema(old), _as_schema(new)
    if before is not None and after is not None:
        return _compare_schema(path, before, after)
    if _same(old, new):
        return []
    if new is False:
        return [
            SchemaChange(path, "constraint_added", True, f"{_what(path)}: now refuses every value")
        ]
    if old is False:
        return [SchemaChange(path, "constraint_removed", False, f"{_what(path)}: now accepted")]
    return [
        SchemaChange(
            path,
            "constraint_changed",
            True,
            f"{_what(path)}: schema changed: {_show(old)} -> {_show(new)} {_MAY_REFUSE}",
        )
    ]


def _compare_schema(
    path: str, old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[SchemaChange]:
    """Changes of one (sub)schema. Only top-level ``default``s are filled in at submit,
    so a default saves a newly required field at the top (``path`` ``""``) only."""
    out = (
        _type_change(path, old, new)
        + _enum_change(path, old, new)
        + _keyword_changes(path, old, new)
        + _additional_change(path, old, new)
    )
    top = path == ""
    old_props, new_props = _properties(old), _properties(new)
    old_req, new_req = _required(old), _required(new)
    # were fields absent from ``properties`` refused before? then a new property widens
    old_refused_others = old.get("additionalProperties") is False and not old.get(
        "patternProperties"
    )

    def sub(key: str) -> str:
        return f"{path}.{key}" if path else key

    for key in new_req:
        if key in old_req:
            continue
        has_default = top and _default_of(new, key) is not _MISSING
        if has_default:
            message = f"field {sub(key)!r} is now required; its default fills it"
        elif key in old_props:
            message = f"field {sub(key)!r} is now required and has no default"
        else:
            message = f"new required field {sub(key)!r} has no default"
        out.append(SchemaChange(sub(key), "required_added", not has_default, message))
    for key in old_req:
        if key not in new_req:
            out.append(
                SchemaChange(
                    sub(key), "required_removed", False, f"field {sub(key)!r} is now optional"
                )
            )
    for key, prop in new_props.items():
        if key in old_props or key in new_req:
            continue
        default = prop.get("default", _MISSING) if isinstance(prop, Mapping) else _MISSING
        extra = "" if default is _MISSING else f" (default {_show(default)})"
        if _validates(prop) and not old_refused_others:
            out.append(
                SchemaChange(
                    sub(key),
                    "property_added",
                    True,
                    f"new optional field {sub(key)!r}{extra}: inputs that already send it "
                    f"must match its schema {_MAY_REFUSE}",
                )
            )
            continue
        out.append(
            SchemaChange(
                sub(key), "property_added", False, f"new optional field {sub(key)!r}{extra}"
            )
        )
    for key in old_props:
        if key in new_props:
            continue
        if new.get("additionalProperties") is False:
            message = (
                f"field {sub(key)!r} removed while additionalProperties is false: "
                "inputs that send it are rejected"
            )
            out.append(SchemaChange(sub(key), "property_removed", True, message))
        elif _restricts_others(new) or new.get("patternProperties"):
            message = (
                f"field {sub(key)!r} removed: other fields are constrained, inputs that "
                f"send it {_MAY_REFUSE}"
            )
            out.append(SchemaChange(sub(key), "property_removed", True, message))
        else:
            out.append(
                SchemaChange(sub(key), "property_removed", False, f"field {sub(key)!r} removed")
            )
    for key, prop in new_props.items():
        if key not in old_props:
            continue
        was = old_props[key]
        out.extend(_subschema_changes(sub(key), was, prop))
        if isinstance(was, Mapping) and isinstance(prop, Mapping):
            out.extend(_default_change(sub(key), was, prop, top and key in new_req))
    out.extend(_items_change(path, old, new))
    return out


def _default_change(
    path: str, old: Mapping[str, Any], new: Mapping[str, Any], needed: bool
) -> list[SchemaChange]:
    """A property's ``default`` added, removed or changed; ``needed``: the property is
    required at the top, where the default fills it in."""
    before, after = old.get("default", _MISSING), new.get("default", _MISSING)
    if before is _MISSING and after is _MISSING:
        return []
    if before is _MISSING:
        return [
            SchemaChange(
                path, "default_added", False, f"field {path!r} has a new default {_show(after)}"
            )
        ]
    if after is _MISSING:
        message = f"field {path!r} lost its default {_show(before)}"
        return [
            SchemaChange(
                path, "default_removed", needed, message + (" and is required" if needed else "")
            )
        ]
    if _same(before, after):
        return []
    return [
        SchemaChange(
            path,
            "default_changed",
            False,
            f"default of field {path!r} changed: {_show(before)} -> {_show(after)}",
        )
    ]


def _items_change(path: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[SchemaChange]:
    """``items`` (a schema for every item: compared as a subschema at ``PATH[]``; the list
    form of older drafts: any change but its removal may refuse inputs)."""
    before, after = old.get("items", _MISSING), new.get("items", _MISSING)
    if before is _MISSING and after is _MISSING:
        return []
    if isinstance(before, list) or isinstance(after, list):
        if _same(before, after):
            return []
        if after is _MISSING:
            text = f"{_what(path)}: items removed (was {_show(before)})"
            return [SchemaChange(path, "constraint_removed", False, text)]
        verb = "added" if before is _MISSING else "changed"
        return [
            SchemaChange(
                path,
                f"constraint_{verb}",
                True,
                f"{_what(path)}: items {verb}: {_show(after)} {_MAY_REFUSE}",
            )
        ]
    return _subschema_changes(f"{path}[]", before, after)


def schema_changes(
    old_schema: Mapping[str, Any] | None, new_schema: Mapping[str, Any] | None
) -> list[SchemaChange]:
    """The differences between two ``input_schema`` versions (None: no schema, which
    accepts any input), each marked ``breaking`` when inputs the old one accepted may now
    be refused.

    The rule: a change of a validation keyword that is not known to widen is breaking,
    with a message saying it may refuse inputs the old schema accepted. Known to widen
    (not breaking): a constraint removed, a bound loosened (``minimum`` lowered,
    ``maxLength`` raised, ...), a type widened (``integer`` -> ``number``, a type added
    to a list), enum values added, a field no longer required, ``additionalProperties``
    no longer false, a new field whose schema refuses nothing. Everything else breaks: a
    property newly required without a top-level ``default``, a ``type`` narrowed or newly
    set, enum values dropped, a keyword added (``pattern``, ``minimum``, ``const``,
    ``format``, ``multipleOf``, ``anyOf``, ``$ref``, ...), a bound tightened, a keyword
    changed otherwise, ``additionalProperties`` newly false (``closed``), a property
    removed while other fields are constrained, a new optional field with a schema (an
    input that already sent it must now match it), a required field's default removed.
    A schema added where there was none is compared with the empty schema (that accepts
    anything). Annotations (``title``, ``description``, ``examples``, ...) are ignored.

    Nested schemas are compared too: ``properties`` of properties (path ``a.b``) and
    ``items`` (path ``a[]``). ``$ref`` targets are NOT followed: a ``$ref`` added, changed
    or a ``$defs`` change is reported as breaking, whatever the definitions say.
    """
    if old_schema is None and new_schema is None:
        return []
    if new_schema is None:
        return [SchemaChange("", "schema_removed", False, "input_schema removed")]
    if old_schema is None:
        added = SchemaChange("", "schema_added", False, "input_schema added")
        return [added, *_compare_schema("", {}, new_schema)]
    return _compare_schema("", old_schema, new_schema)


# --- text -----------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    """``text`` cut after each ``\\n`` only (not at the other breaks ``splitlines`` knows);
    the last line keeps no newline when the text ends without one."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def source_diff(
    old_text: str | None, new_text: str | None, old_label: str = "old", new_label: str = "new"
) -> str:
    """The unified diff (3 lines of context, as ``diff -u`` and git write it, with
    ``\\ No newline at end of file`` where one is missing) of two flow sources; ``''``
    when they are equal. None is an absent file (diffed as empty)."""
    a, b = old_text or "", new_text or ""
    if a == b:
        return ""
    out: list[str] = []
    for line in difflib.unified_diff(_lines(a), _lines(b), fromfile=old_label, tofile=new_label):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


_SHOWN_CHARS = 80


def _show(value: Any, field: str = "") -> str:
    """A value in a text line: strings quoted (``'0 2 * * *'``), durations of
    :data:`_DURATIONS` fields in flow-file style (``30s``, ``1m``), None as ``none``,
    other JSON compact; cut at 80 characters."""
    if value is _MISSING:
        return "unset"
    if value is None:
        return "none"
    if field in _DURATIONS and isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return format_duration(value)
        except ValueError:
            pass
    if isinstance(value, str):
        text = repr(value)
    else:
        text = json.dumps(value, separators=(", ", ": "), ensure_ascii=False, default=str)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def _leaves(field: str, old: Any, new: Any) -> list[tuple[str, Any, Any]]:
    """(dotted field, old, new) of the differing leaves of two mappings."""
    if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
        return [(field, old, new)]
    out: list[tuple[str, Any, Any]] = []
    for key in dict.fromkeys([*old, *new]):
        a, b = old.get(key, _MISSING), new.get(key, _MISSING)
        if a is _MISSING or b is _MISSING or not _same(a, b):
            out.extend(_leaves(f"{field}.{key}", a, b))
    return out


def _describe_fields(fields: Iterable[FieldChange]) -> list[str]:
    parts: list[str] = []
    for change in fields:
        if change.field == "input_schema":
            parts.append("input_schema changed")
            continue
        leaves = (
            _leaves(change.field, change.old, change.new)
            if change.field in _FLATTENED
            else [(change.field, change.old, change.new)]
        )
        parts.extend(f"{name} {_show(a, name)} -> {_show(b, name)}" for name, a, b in leaves)
    return parts


def _describe_schedule(change: ScheduleChange) -> str:
    if change.change == "removed":
        return f"- schedule {change.name}"
    if change.change == "added":
        spec = change.new or {}
        text = f"+ schedule {change.name}: cron {_show(spec.get('cron'))}"
        if spec.get("timezone", "UTC") != "UTC":
            text += f", timezone {_show(spec.get('timezone'))}"
        if spec.get("input") is not None:
            text += f", input {_show(spec.get('input'))}"
        return text
    fields = _field_changes(change.old or {}, change.new or {})
    return f"~ schedule {change.name}: " + ", ".join(_describe_fields(fields))


def describe_change(change: FlowChange) -> list[str]:
    """The change as text lines, one per fact; none when ``unchanged``::

        + flow order-fulfilment
        ~ description 'a' -> 'b'
        + node ship (fan_out)
        - node old
        ~ node charge: retry.max_attempts 3 -> 5, timeout 30s -> 1m
        ~ schedule nightly: cron '0 2 * * *' -> '0 3 * * *'
        ! input_schema: new required field 'region' has no default (breaking)
        ~ input_schema: new optional field 'note'

    Durations are shown in flow-file style, other values as compact JSON with strings
    quoted.
    """
    lines: list[str] = []
    if change.status == "unchanged":
        return lines
    if change.status == "added":
        lines.append(f"+ flow {change.name}")
    elif change.status == "removed":
        lines.append(f"- flow {change.name}")
    flow_fields = [  # the schema lines below say what changed in it
        f for f in change.flow_fields if not (f.field == "input_schema" and change.schema)
    ]
    lines.extend(f"~ {part}" for part in _describe_fields(flow_fields))
    lines.extend(f"+ node {n.name} ({n.type})" for n in change.nodes_added)
    lines.extend(f"- node {n.name}" for n in change.nodes_removed)
    lines.extend(
        f"~ node {n.name}: " + ", ".join(_describe_fields(n.fields)) for n in change.nodes_changed
    )
    lines.extend(_describe_schedule(s) for s in change.schedules)
    for s in change.schema:
        mark = "!" if s.breaking else "~"
        lines.append(f"{mark} input_schema: {s.message}{' (breaking)' if s.breaking else ''}")
    if not lines:
        lines.append(f"~ flow {change.name}: written differently, same effect")
    return lines
