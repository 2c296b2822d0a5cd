"""The web dashboard (the ``ui`` extra: Starlette, Jinja2, uvicorn; htmx vendored under
``static/`` with its licence): :func:`create_app` builds the ASGI application that
``cyclone-flow ui`` serves and an application can mount. It reads through the
:class:`~cyclone_flow.Client`'s public methods and acts through the same methods as the
CLI; docs/ui.md describes the pages, authentication and read-only mode."""

from __future__ import annotations

from cyclone_flow.ui.app import create_app

__all__ = ["create_app"]
