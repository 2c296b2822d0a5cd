"""Build the typed :class:`Flow` from a document that passed the schema and the checks.

``defaults`` are applied here: a node's ``queue``, ``priority``, ``timeout``,
``on_dep_failure`` and ``on_dep_skip`` replace the default when given; ``retry`` merges
key by key (and ``retry.backoff`` too), so ``defaults: {retry: {max_attempts: 3}}`` plus a node's
``retry: {backoff: {initial: 1s}}`` gives 3 attempts with a 1s initial backoff.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, cast

from cyclone_flow.durations import parse_duration
from cyclone_flow.flowfile.model import (
    JSON,
    Backoff,
    Flow,
    Limit,
    Node,
    NodeType,
    OnDepFailure,
    OnDepSkip,
    Retry,
)
from cyclone_flow.flowfile.template import parse_ref
from cyclone_flow.names import DEFAULT_QUEUE

__all__ = ["OPTION_KEYS", "build_flow", "document_digest"]

OPTION_KEYS = ("over", "max_parallel", "flow", "signal", "max_wait")
"""Type-specific node keys, kept as written in :attr:`Node.options`."""


def document_digest(document: JSON) -> str:
    """sha256 hex of the canonical JSON of ``document`` (sorted keys, no spaces)."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _retry(defaults: Mapping[str, Any], node: Mapping[str, Any]) -> Retry:
    merged: dict[str, Any] = {**defaults.get("retry", {}), **node.get("retry", {})}
    backoff_doc: dict[str, Any] = {
        **defaults.get("retry", {}).get("backoff", {}),
        **node.get("retry", {}).get("backoff", {}),
    }
    base = Backoff()
    backoff = Backoff(
        initial_s=parse_duration(backoff_doc.get("initial", base.initial_s)),
        max_s=parse_duration(backoff_doc.get("max", base.max_s)),
        multiplier=float(backoff_doc.get("multiplier", base.multiplier)),
        jitter=float(backoff_doc.get("jitter", base.jitter)),
    )
    return Retry(
        max_attempts=int(merged.get("max_attempts", Retry().max_attempts)), backoff=backoff
    )


def _when(value: Any) -> str | None:
    """A node's ``when:`` as text (YAML booleans become ``true``/``false``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _limit(flow: str, node: str, value: Any, rate: bool) -> Limit | None:
    """The :class:`Limit` of a ``concurrency:`` / ``rate_limit:`` mapping (None: none)."""
    if not isinstance(value, Mapping):
        return None
    key = value.get("key")
    ref = parse_ref(key) if isinstance(key, str) else None
    return Limit(
        group=str(value.get("group") or f"{flow}.{node}"),
        limit=int(value["limit"]),
        key_path=ref.path if ref is not None else None,
        key_value=key if isinstance(key, str) and ref is None else None,
        per_s=parse_duration(value["per"]) if rate else None,
        key_node=ref.node if ref is not None else None,
    )


def _limited(
    flow: str, node: str, node_doc: Mapping[str, Any], defaults: Mapping[str, Any], key: str
) -> Limit | None:
    """A node's ``key`` limit (``concurrency`` or ``rate_limit``): its own, else the
    default's for an action or fan_out node (the others have no steps to limit)."""
    if key in node_doc:
        return _limit(flow, node, node_doc[key], key == "rate_limit")
    if node_doc.get("type", "action") in ("action", "fan_out") and key in defaults:
        return _limit(flow, node, defaults[key], key == "rate_limit")
    return None


def build_flow(
    document: Mapping[str, Any],
    path: str | None = None,
    children: Mapping[str, Flow] | None = None,
) -> Flow:
    """Return the :class:`Flow` of a valid ``document`` (plain JSON data).

    ``children`` maps each ``type: child`` node to its loaded flow (a flow without them can
    be shown and inspected, not submitted). The digest covers the
    document and, when there are child flows, their digests: a changed child file makes
    a new definition of the parent too.

    The caller must have validated and checked ``document``; a document that is not valid
    may raise ``KeyError``, ``TypeError`` or ``ValueError`` here.
    """
    defaults: Mapping[str, Any] = document.get("defaults", {})
    nodes: dict[str, Node] = {}
    for name, node_doc in document["nodes"].items():
        timeout = node_doc.get("timeout", defaults.get("timeout"))
        import_wait = (  # only the nodes whose steps run a handler
            node_doc.get("import_wait", defaults.get("import_wait", document.get("import_wait")))
            if node_doc.get("type", "action") in ("action", "fan_out")
            else None
        )
        nodes[name] = Node(
            name=name,
            type=cast(NodeType, node_doc.get("type", "action")),
            call=node_doc.get("call"),
            needs=tuple(node_doc.get("needs", ())),
            input=node_doc.get("input"),
            queue=node_doc.get("queue", defaults.get("queue", DEFAULT_QUEUE)),
            priority=int(node_doc.get("priority", defaults.get("priority", 0))),
            timeout_s=None if timeout is None else parse_duration(timeout),
            retry=_retry(defaults, node_doc),
            on_dep_failure=cast(
                OnDepFailure,
                node_doc.get("on_dep_failure", defaults.get("on_dep_failure", "fail_run")),
            ),
            options={k: node_doc[k] for k in OPTION_KEYS if k in node_doc},
            queue_set="queue" in node_doc,
            priority_set="priority" in node_doc,
            max_wait_s=None
            if node_doc.get("max_wait") is None
            else parse_duration(node_doc["max_wait"]),
            when=_when(node_doc.get("when")),
            on_dep_skip=cast(
                OnDepSkip, node_doc.get("on_dep_skip", defaults.get("on_dep_skip", "skip"))
            ),
            concurrency=_limited(document["name"], name, node_doc, defaults, "concurrency"),
            rate_limit=_limited(document["name"], name, node_doc, defaults, "rate_limit"),
            import_wait_s=None if import_wait is None else parse_duration(import_wait),
        )
    children = dict(children or {})
    digest = document_digest(document)
    if children:
        digest = document_digest(
            {"document": digest, "children": {k: c.digest for k, c in sorted(children.items())}}
        )
    deadline = document.get("deadline")
    return Flow(
        name=document["name"],
        nodes=nodes,
        document=document,
        digest=digest,
        description=document.get("description"),
        input_schema=document.get("input_schema"),
        path=path,
        deadline_s=None if deadline is None else parse_duration(deadline),
        children=children,
    )
