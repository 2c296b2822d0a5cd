"""A signal no node awaits names the signals the run's wait_signal nodes do await when
one is close (did-you-mean for signal names)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cyclone_flow import Client, SignalRejectedError
from cyclone_flow.flowfile import load_flow_text

FLOW = load_flow_text("name: approval\nnodes:\n  approve: {type: wait_signal, signal: approved}\n")


def test_a_misspelt_signal_suggests_the_awaited_one(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run_id = client.submit(FLOW)
    with pytest.raises(SignalRejectedError) as info:
        client.signal(run_id, "aproved")
    assert str(info.value).endswith("waits for it (any more); did you mean 'approved'?")
    with pytest.raises(SignalRejectedError) as far:
        client.signal(run_id, "zzz")
    assert "did you mean" not in str(far.value)
