"""The pure flow-file pipeline: load (libyaml or ruamel, positions) -> validate (JSON Schema)
-> check (networkx) -> build the typed :class:`Flow`. No database.
"""

from cyclone_flow.flowfile import template
from cyclone_flow.flowfile.build import build_flow, document_digest
from cyclone_flow.flowfile.diagram import to_dot, to_mermaid
from cyclone_flow.flowfile.lint import LintPathError, NoFlowFilesError, find_flow_files, lint_paths
from cyclone_flow.flowfile.load import lint_text, load_flow, load_flow_text
from cyclone_flow.flowfile.model import Backoff, Flow, Node, Retry
from cyclone_flow.flowfile.template import Ref, references, render

__all__ = [
    "Backoff",
    "Flow",
    "LintPathError",
    "NoFlowFilesError",
    "Node",
    "Ref",
    "Retry",
    "build_flow",
    "document_digest",
    "find_flow_files",
    "lint_paths",
    "lint_text",
    "load_flow",
    "load_flow_text",
    "references",
    "render",
    "template",
    "to_dot",
    "to_mermaid",
]
