"""cyclone-flow's benchmark suite: ``python -m benchmarks`` (see README: Benchmarks).

One module per benchmark (``ceiling``, ``noop``, ``chain``, ``fanout``, ``exactly_once``,
``soak``; ``latency`` when present), the shared plumbing in ``common``, the handlers the
benchmark flows call in ``handlers``, the flows in ``flows/`` and the suite's own SQL
(reads of the benchmark's results and the raw-SQL ceiling's batched completion) in
``sql/bench.sql``. Findings from profiling the engine are in ``FINDINGS.md``.
"""
