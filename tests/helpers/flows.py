"""Flow builders for tests."""

from __future__ import annotations

import json

from cyclone_flow.flowfile import Flow, load_flow_text


def step_flow_text(call: str, *, name: str = "flow", node: str = "s", **keys: object) -> str:
    """The YAML of a flow ``name`` with one action node ``node`` calling ``call``.

    ``keys`` are the node's other keys in file order: a string value is written as is
    (so ``timeout="1s"`` or ``retry="{max_attempts: 3}"`` are YAML), any other value as
    JSON (which YAML reads the same).
    """
    lines = [f"name: {name}", "nodes:", f"  {node}:", f"    call: {call}"]
    for key, value in keys.items():
        text = value if isinstance(value, str) else json.dumps(value)
        lines.append(f"    {key}: {text}")
    return "\n".join(lines) + "\n"


def step_flow(call: str, *, name: str = "flow", node: str = "s", **keys: object) -> Flow:
    """:func:`step_flow_text` loaded (``load_flow_text``)."""
    return load_flow_text(step_flow_text(call, name=name, node=node, **keys))
