"""Example handlers for cyclone-flow's example flows (``examples/flows/*.yaml``).

Put the repository's ``examples/`` folder on ``sys.path`` (or ``PYTHONPATH``) and refer to
handlers as ``cyclone_examples.<module>:<function>``, e.g. ``cyclone_examples.weather:load_daily``.

Each module keeps its transforms pure (plain data in, plain data out) and its handlers thin:
a handler unpacks its input, calls the transforms and, for database writes, executes SQL on
``ctx.completion_tx()`` so the writes commit together with the step's completion.
"""
