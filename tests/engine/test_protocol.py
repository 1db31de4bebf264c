"""The engine's typed contract: snapshots read by attribute (dicts only through ``as_dict``, for
JSON) and one ``ModelInfo`` for every engine."""

import json
from collections.abc import Mapping

import pytest

from engine.protocol import BlockPoolSnapshot, BlockTable, EngineStats, ModelInfo


def test_stats_are_a_dataclass_not_a_mapping():
    stats = EngineStats(running=2, waiting=1, blocks_used=3)
    assert not isinstance(stats, Mapping)
    with pytest.raises(TypeError):
        stats["running"]  # noqa: B018 - the read that must fail
    assert (stats.running, stats.blocks_used, stats.prefix_hit_rate) == (2, 3, None)


def test_stats_as_dict_keeps_the_counts_and_leaves_out_none_fields():
    plain = EngineStats(finished=4).as_dict()
    assert plain["finished"] == 4 and plain["batching_note"] is None  # the counts always
    assert "blocks_used" not in plain and "prefix_hit_rate" not in plain
    paged = EngineStats(batching=True, blocks_total=8, blocks_used=0, prefix_hit_rate=0.5).as_dict()
    assert paged["blocks_used"] == 0 and paged["prefix_hit_rate"] == 0.5
    json.dumps(paged)


def test_block_snapshot_visible_and_as_dict():
    assert not BlockPoolSnapshot.empty().visible and BlockPoolSnapshot.empty().as_dict() == {}
    snap = BlockPoolSnapshot(block_size=16, num_blocks=2, state=["used", "free"], blocks_per_cell=1,
                             tables=[BlockTable(request_id="r", blocks=[0], tokens=5)])
    assert snap.visible and not isinstance(snap, Mapping)
    plain = snap.as_dict()
    assert plain["tables"] == [{"request_id": "r", "blocks": [0], "tokens": 5, "index": 0,
                                "ref_counts": []}]
    json.dumps(plain)


def test_model_info_is_one_frozen_type_for_every_engine():
    import dataclasses

    from app.remote.engine import remote_info
    from engine.model import model_info
    from tests.support.fakes import FakeEngine

    assert model_info.ModelInfo is ModelInfo  # the loader's type is the protocol's
    fake, remote = FakeEngine().info, remote_info("m", "vLLM", "http://h/v1", 4096)
    assert isinstance(fake, ModelInfo) and isinstance(remote, ModelInfo)
    assert (remote.served_by, remote.base_url, remote.spec, remote.weights_bytes) == (
        "vLLM", "http://h/v1", None, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fake.context_len = 40
    assert fake.weights_read_bytes == fake.weights_bytes  # no lookup-only table counted apart
    assert dataclasses.replace(fake, step_weights_bytes=10).weights_read_bytes == 10
