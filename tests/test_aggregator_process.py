"""rlscope_ray.aggregator_process: start, endpoint, stop, and a start that fails."""
from __future__ import annotations

import json

import pytest

from rlscope_ray.aggregator_process import AggregatorStartError, start_aggregator


def test_starts_listening_and_stops(tmp_path):
    with start_aggregator(tmp_path / "out", config={"steps": [2]}, work_dir=tmp_path) as agg:
        assert agg.endpoint.startswith("tcp://127.0.0.1:")
        assert agg.proc.poll() is None
        assert json.loads((tmp_path / "config.json").read_text()) == {"steps": [2]}
    assert agg.proc.poll() is not None  # SIGTERM on the way out
    assert agg.stop() == agg.proc.returncode  # again: a no-op
    assert (tmp_path / "out" / "run.json").exists()


def test_a_wildcard_bind_gets_the_callers_host(tmp_path):
    with start_aggregator(tmp_path / "out", listen="tcp://0.0.0.0:*", connect_host="10.1.2.3") as agg:
        assert agg.endpoint.startswith("tcp://10.1.2.3:")


def test_an_aggregator_that_exits_is_an_error_with_its_output(tmp_path):
    log = tmp_path / "agg.log"
    with pytest.raises(AggregatorStartError) as e:
        start_aggregator(tmp_path / "out", listen="nonsense://x", log=log)
    assert "the aggregator did not start (it exited with status 2)" in str(e.value)
    assert str(log) in str(e.value)
    assert "cannot listen on 'nonsense://x'" in str(e.value)
