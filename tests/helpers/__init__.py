"""Helpers shared by the test suite, importable as ``helpers`` (pytest's ``pythonpath``
option puts ``tests/`` on ``sys.path``):

- :mod:`helpers.paths`: the repository's folders and the ``cyclone-flow`` script.
- :mod:`helpers.flows`: flow builders.
- :mod:`helpers.rows`: reading engine rows; the ``ledger`` business table.
- :mod:`helpers.engine`: driving a step's claim, completion and failure directly; losing
  a client's wakeups; ``database(client)``, the client's database handle.
- :mod:`helpers.procs`: real worker processes, polling until a condition holds.
- :mod:`helpers.cli`: the CLI in a subprocess, its JSON output.
- :mod:`helpers.doc_tables`: the pipe tables of the docs.
- :mod:`helpers.catalog`: a version-stable description of a schema (the reference of
  ``tests/migration``).
- :mod:`helpers.schema_pool`: the migrated schemas the ``schema`` fixture hands out.
- :mod:`helpers.http`: a local HTTP server counting its requests.

Handler modules that worker processes import stay in ``tests/handlers``."""
