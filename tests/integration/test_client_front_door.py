"""The Client as a front door: a client that only submits builds no worker machinery
(``start()`` builds it, through ``cyclone_flow.worker.build``); the dashboard reads live
on ``client.reads``; the renamed public names keep their old names as deprecated aliases
that warn (one release)."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from typing import Any

import pytest

from cyclone_flow import Client
from cyclone_flow.client import preview_submit
from cyclone_flow.config import ClientConfig
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.inserter import Inserter, RunPreview, preview_run
from cyclone_flow.maintenance.scheduler import ScheduleScanner
from cyclone_flow.reads import READS, Reads
from cyclone_flow.worker.cache import OutputCache
from cyclone_flow.worker.completion import BatchSink
from cyclone_flow.worker.execute import Executor

ONE = """
name: one
nodes:
  only:
    call: cyclone_test_handlers.basic:echo
"""


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many of each worker-side object were constructed since the test began."""
    counts = {cls.__name__: 0 for cls in (ScheduleScanner, OutputCache, BatchSink, Executor)}
    for cls in (ScheduleScanner, OutputCache, BatchSink, Executor):
        original = cls.__init__

        def counting(self: Any, *args: Any, _o: Any = original, _n: str = cls.__name__, **kw: Any):
            counts[_n] += 1
            _o(self, *args, **kw)

        monkeypatch.setattr(cls, "__init__", counting)
    return counts


def test_a_submit_only_client_builds_no_worker_machinery_until_start(
    make_client: Callable[..., Client], built: dict[str, int]
) -> None:
    client = make_client(workers=1)
    flow = load_flow_text(ONE)
    run_id = client.submit(flow, {"n": 1})
    client.submit_many(flow, [{"n": 2}, {"n": 3}])
    client.enqueue("cyclone_test_handlers.basic:echo", {"n": 4})
    client.get_run(run_id)
    assert built == dict.fromkeys(built, 0)
    assert client.runtime is None
    client.start()
    assert built == dict.fromkeys(built, 1)
    assert client.runtime is not None
    assert client.wait(run_id, timeout=20).state == "completed"
    client.start()  # started already: nothing more is built
    assert built == dict.fromkeys(built, 1)


def test_trigger_schedule_builds_the_scanner_only(
    make_client: Callable[..., Client], built: dict[str, int]
) -> None:
    client = make_client()
    name = client.add_schedule(load_flow_text(ONE), "0 0 * * *")
    client.trigger_schedule(name)
    assert built == {"ScheduleScanner": 1, "OutputCache": 0, "BatchSink": 0, "Executor": 0}
    assert client.schedule_scanner is client.schedule_scanner  # built once


def test_the_dashboard_reads_are_on_client_reads_and_the_old_names_warn(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    run_id = client.submit(load_flow_text(ONE), {"n": 1})
    assert isinstance(client.reads, Reads)
    assert [r.id for r in client.reads.list_runs_page(limit=5)] == [run_id]
    for name in READS:
        with pytest.warns(DeprecationWarning, match=rf"Client\.{name} is deprecated"):
            alias = getattr(client, name)
        assert alias == getattr(client.reads, name)  # the same bound method of Reads
    with pytest.warns(DeprecationWarning):
        assert [r.id for r in client.list_runs_page(limit=5)] == [run_id]
    with pytest.warns(DeprecationWarning):
        assert client.count_runs_by_state(3600) == client.reads.count_runs_by_state(3600)
    with pytest.warns(DeprecationWarning):
        assert client.list_items(run_id, "only") == []


RENAMED = {
    "item_progress": "count_items",
    "queue_info": "get_queue_info",
    "step_logs": "list_step_logs",
    "step_log_tail": "list_step_log_tail",
    "run_definition": "get_run_definition",
    "failed_run_ids": "list_failed_run_ids",
}


def test_the_noun_first_read_names_are_deprecated_aliases_of_the_verb_first_ones(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    run_id = client.submit(load_flow_text(ONE), {"n": 1})
    for old, new in RENAMED.items():
        with pytest.warns(
            DeprecationWarning, match=rf"Client\.{old} is deprecated: use Client\.{new}"
        ):
            alias = getattr(client, old)
        assert alias == getattr(client, new)
    with pytest.warns(DeprecationWarning):
        assert client.run_definition(run_id) == client.get_run_definition(run_id)
    with pytest.warns(DeprecationWarning):
        assert client.item_progress(run_id) == client.count_items(run_id) == {}
    with pytest.warns(DeprecationWarning):
        assert client.failed_run_ids() == client.list_failed_run_ids() == []
    # read on the class, an old name is still a method: same signature, it warns
    assert inspect.signature(Client.item_progress) == inspect.signature(Client.count_items)
    with pytest.warns(DeprecationWarning, match=r"Client\.item_progress is deprecated"):
        assert Client.item_progress(client, run_id) == {}
    with pytest.warns(DeprecationWarning, match=r"Client\.list_flows is deprecated"):
        assert [f.name for f in Client.list_flows(client)] == ["one"]


def test_client_worker_is_a_deprecated_alias_of_runtime(
    make_client: Callable[..., Client],
) -> None:
    client = make_client(workers=1)
    with pytest.warns(DeprecationWarning, match=r"Client\.worker is deprecated"):
        assert client.worker is None
    client.start()
    assert client.runtime is not None
    with pytest.warns(DeprecationWarning):
        assert client.worker is client.runtime


def test_the_old_insert_path_and_preview_names_warn_and_still_work() -> None:
    sys.modules.pop("cyclone_flow.producer", None)
    with pytest.warns(DeprecationWarning, match=r"cyclone_flow\.producer is deprecated"):
        producer = importlib.import_module("cyclone_flow.producer")
    assert issubclass(producer.Producer, Inserter)
    assert producer.RunPlan is RunPreview
    assert producer.plan_run is preview_run
    from cyclone_flow import RunId
    from cyclone_flow.inserter import RunId as new_run_id

    assert producer.RunId is RunId is new_run_id

    flow = load_flow_text(ONE)
    old_inserter = producer.Producer(None, ClientConfig())  # no database: checks only
    with pytest.warns(DeprecationWarning, match=r"prepare_input\(spec=\.\.\.\) is deprecated"):
        text = old_inserter.prepare_input(spec=flow, run_input={"n": 1})
    assert text == old_inserter.prepare_input(flow, {"n": 1}) == '{"n":1}'

    import cyclone_flow.client as client_module

    with pytest.warns(DeprecationWarning, match="plan_submit is deprecated"):
        old = client_module.plan_submit(flow, {"n": 1}, queue="q")
    assert old == preview_submit(flow, {"n": 1}, queue="q")
    with pytest.warns(DeprecationWarning, match="RunPlan is deprecated"):
        assert client_module.RunPlan is RunPreview
