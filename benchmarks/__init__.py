"""cyclone-flow benchmarks: runnable modules (``python -m benchmarks.<name>``), each with a
``run(database_url, *, samples) -> dict`` function that other tooling can call.
Benchmarks are measurements, not tests: they assert nothing and live outside the suite.
"""
