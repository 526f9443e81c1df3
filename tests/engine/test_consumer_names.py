"""A consumer is opened under the name its config.json records (jetspark/engine/consumer.py).

Every consumer is created with its name in the document (``"name"``, and its config's
``name``); a checksummed document that lost both is damage, reported like any other
(CorruptStoreError naming the file), never a consumer served under no name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import jetspark
from jetspark.engine import metafile
from jetspark.errors import CorruptStoreError


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _store(path: Path) -> Path:
    """Stream S with consumers A and B, six messages; B's config.json."""
    with jetspark.connect(path) as js:
        js.add_stream(name="S", subjects=["s.>"])
        js.add_consumer("S", durable_name="A", ack_policy="explicit")
        js.add_consumer("S", durable_name="B", ack_policy="explicit")
        for i in range(6):
            js.publish("s.x", b"%d" % i)
    return path / "streams" / "S" / "data" / "cons" / "B" / "config.json"


def test_the_recorded_name_is_the_consumers_name(tmp_path):
    cfg = _store(tmp_path)
    doc = metafile.load(cfg)
    assert doc["name"] == doc["config"]["name"] == "B"
    # The document's own "name" is the one read: the config's alone also serves.
    del doc["name"]
    metafile.save(cfg, doc)
    with jetspark.connect(tmp_path) as js:
        assert js.consumer_info("S", "B").name == "B"
        assert [c.name for c in js.consumers_info("S")] == ["A", "B"]


@pytest.mark.parametrize("durable", ["B", None], ids=["durable-name-kept", "durable-name-lost"])
def test_a_consumer_config_without_a_name_is_reported_not_served(tmp_path, durable):
    # A durable name left behind does not name the consumer: the document is damaged all the same.
    cfg = _store(tmp_path)
    doc = metafile.load(cfg)
    del doc["name"]
    doc["config"]["name"] = None
    doc["config"]["durable_name"] = durable
    metafile.save(cfg, doc)
    before = _tree(cfg.parent)
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(CorruptStoreError, match=r"cons/B/config.json is not a consumer config") as err:
            js.consumer_info("S", "B")
        assert err.value.path == str(cfg)
        # The others keep working, and the damaged one is neither listed nor served.
        assert [c.name for c in js.consumers_info("S")] == ["A"]
        msgs = js.pull_subscribe_bind("A", stream="S").fetch(2, no_wait=True)
        assert [m.data for m in msgs] == [b"0", b"1"]
    assert _tree(cfg.parent) == before
