"""The run state machine: transitions as plain functions over a :class:`~cyclone_flow.engine.tx.Tx`
that never commit (the caller owns the transaction; :func:`~cyclone_flow.engine.tx.transaction`
opens one and publishes its wakeups after the commit).

Modules, bottom up: ``tx`` (Tx, Effects, Outcome), ``render`` (templates against a run's
data), ``sequences``, ``fan_out`` and ``child_runs`` (their statements as decisions),
``advance`` (the recursive core: release, start, completion and failure propagation),
then the entry points ``submit``, ``claim``, ``complete``, ``fail``, ``signals`` and
``operator``.
"""
