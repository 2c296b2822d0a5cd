"""The background services every started client runs, in one shape (River's
``internal/maintenance``): a frozen ``XConfig`` with named defaults (units in the names:
``interval_s``, ``batch_size``), a constructor taking the database, the config, a publish
callable, a logger and an event reporter (never a Client), and ``run_once(now=None) ->
XResult``, a small frozen dataclass of counts. ``now`` pins the clock of the service's
time-dependent statements (``coalesce(%(now)s::timestamptz, now())``), so each service is
tested by calling ``run_once`` without starting a client.

- :mod:`~cyclone_flow.maintenance.rescuer`: the recovery sweep (timed-out steps, the
  reclaim limit, expired leases back to available);
- :mod:`~cyclone_flow.maintenance.scheduler`: the schedule scanner (cron ticks);
- :mod:`~cyclone_flow.maintenance.sequences`: the safety net of stalled sequences;
- :mod:`~cyclone_flow.maintenance.retention`: the retention sweep (purge old runs);
- :mod:`~cyclone_flow.maintenance.wait_scanner` and
  :mod:`~cyclone_flow.maintenance.deadline_scanner`: expired waits, runs past deadline;
- :mod:`~cyclone_flow.maintenance.worker_reaper`: deletes the heartbeat rows of dead
  workers;
- :mod:`~cyclone_flow.maintenance.rate_window_pruner`: deletes the rate-limit rows of
  idle rate keys;
- :mod:`~cyclone_flow.maintenance.loop`: the thin loop of the worker's maintenance
  thread, which runs each service's ``run_once`` in turn.
"""
