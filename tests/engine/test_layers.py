"""The storage layers seen from below, on real stores in temporary directories.

storage.py's module docstring draws the layers: verify, subject_stats and recovery
work on the block index alone.  consumer.py's says the delivery state machine plans
a batch without moving the state and returns the records to write, and ``commit``
writes them, then takes them in memory (tests/engine/test_consumer_plans.py: every planner).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import jetspark
from jetspark import AckPolicy, ConsumerConfig
from jetspark.engine import consumer_log, subject_stats, verify
from jetspark.errors import CorruptStoreError
from tests.conftest import FakeClock


def _stream(js, name: str = "S"):
    js.stream_info(name)  # opens it in this handle
    return js._store.streams[name]


def _filled(path, n: int = 60, clock=None):
    js = jetspark.connect(path, clock=clock or FakeClock())
    js.add_stream(name="S", subjects=["a.>"])
    for i in range(1, n + 1):
        js.publish(f"a.{i % 3}", b"m%d" % i)
    return js


def test_verify_and_subject_stats_work_on_the_block_index_alone(tmp_path):
    with _filled(tmp_path) as js:
        js.delete_msg("S", 7)
        ix = _stream(js).storage.index
        count, first, last = subject_stats.build(ix)
        by_name = dict(zip(ix.subject_table.names, count.tolist()))
        assert by_name == js.stream_info("S", subjects_filter=">").state.subjects
        assert verify.read_message(ix, 8)[1:3] == (b"", b"m8")
        assert [r[2] for r in verify.read_messages(ix, [9, 3, 4])] == [b"m9", b"m3", b"m4"]
        assert not ix.is_live(7) and ix.is_live(8) and ix.next_live(7) == 8
        assert not len(verify.bad_records(ix, 1, 60))


def test_a_damaged_record_is_found_through_the_index(tmp_path):
    with _filled(tmp_path) as js:
        ix = _stream(js).storage.index
        e = ix.entries(20, 20)[0]
        blk = ix.blocks[ix.block_index(20)]
        os.pwrite(blk.dfd, b"X", int(e["doff"]))  # one payload byte of message 20
        assert verify.bad_records(ix, 1, 60).tolist() == [20]
        with pytest.raises(CorruptStoreError, match="message 20 fails its checksum"):
            verify.read_message(ix, 20)


def test_a_sequence_no_block_holds_is_a_typed_error(tmp_path):
    with _filled(tmp_path, 5) as js:
        ix = _stream(js).storage.index
        with pytest.raises(CorruptStoreError, match="no block file holds sequence 0"):
            ix.entries(0, 2)
        assert len(ix.entries(3, 2)) == 0  # an empty range reads nothing


def test_a_planned_batch_moves_nothing_until_committed(tmp_path):
    clock = FakeClock()
    with _filled(tmp_path, 10, clock) as js, jetspark.connect(tmp_path, clock=clock) as other:
        js.add_consumer("S", ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT))
        st = _stream(js)
        with st.locked():
            c = st.consumers.by_name["D"]
            size = os.path.getsize(c.log.path)
            out, changes = c.plan_batch(4, clock())
            assert [q for q, _, _ in out] == [1, 2, 3, 4]
            assert (c.delivered_consumer_seq, sorted(c.pending)) == (0, [])  # planned: the state did not move
            assert os.path.getsize(c.log.path) == size  # nor the log
            c.commit(changes)
            assert (c.delivered_consumer_seq, sorted(c.pending)) == (4, [1, 2, 3, 4])
            assert os.path.getsize(c.log.path) > size
        info = other.consumer_info("S", "D")
        assert (info.delivered.stream_seq, info.num_ack_pending) == (4, 4)


def test_a_planned_batch_lists_its_records_in_the_order_they_are_written(tmp_path):
    clock = FakeClock()
    with _filled(tmp_path, 10, clock) as js, jetspark.connect(tmp_path, clock=clock) as other:
        js.add_consumer("S", ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT, ack_wait=1, max_deliver=1))
        st = _stream(js)
        with st.locked():
            c = st.consumers.by_name["D"]
            out, changes = c.plan_batch(3, clock())
            assert [op for op, _, _ in changes] == [consumer_log.DELIVER]
            c.commit(changes)
        clock.advance(5)  # past ack_wait: 1..3 reached max_deliver and leave pending
        with st.locked():
            c = st.consumers.by_name["D"]
            out, changes = c.plan_batch(10, clock())
            assert [q for q, _, n in out] == list(range(4, 11))
            assert [op for op, _, _ in changes] == [consumer_log.MAXED, consumer_log.DELIVER]
            assert changes[0][2]["sseq"].tolist() == [1, 2, 3]
            assert changes[0][1][1] == 4  # the expiry's record carries the state before the new deliveries
            c.commit(changes)
        info = other.consumer_info("S", "D")
        assert (info.delivered.stream_seq, info.num_ack_pending) == (10, 7)


# What each lower module of the engine's storage may import from the engine (every import
# counted, TYPE_CHECKING and function-level ones included): each layer depends only on
# those below it, and none on the façade (storage.py) or the consumer that compose them.
LAYERS = {
    "records": set(),
    "blocks": {"diskio"},
    "block_index": {"blocks", "records", "removed", "state_header", "subject_table"},
    "verify": {"block_index", "blocks", "records"},
    "subject_stats": {"block_index", "records", "state_header"},
    "recovery": {"block_index", "blocks", "records", "subject_stats", "verify"},
    "block_writer": {"block_index", "blocks", "diskio", "records", "subject_stats", "subject_table"},
    "consumer_log": {"diskio", "metafile"},
    "consumer_due": set(),
    "consumer_held": set(),
    "consumer_state": {"consumer_due", "consumer_held", "consumer_log"},
    "consumer_match": {"records"},
    "consumer_fetch": {"consumer_due", "consumer_log", "consumer_match", "consumer_state"},
}


ENGINE = Path(jetspark.__file__).parent / "engine"


def _engine_imports(path: Path) -> set[str]:
    """The engine modules a source file imports, wherever the import statement is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n.split(".")[2] for n in names if n.startswith("jetspark.engine.") and n.count(".") >= 2}
    return found & {p.stem for p in ENGINE.glob("*.py")}


@pytest.mark.parametrize("module", sorted(LAYERS))
def test_each_storage_layer_imports_only_the_layers_below_it(module):
    assert _engine_imports(ENGINE / f"{module}.py") == LAYERS[module]


def test_the_layer_check_counts_type_checking_and_function_level_imports(tmp_path):
    src = tmp_path / "layer.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "from jetspark.engine.records import SID_NONE\n"
        "if TYPE_CHECKING:\n    from jetspark.engine.storage import StreamStorage\n"
        "def f():\n    from jetspark.engine import consumer\n"
    )
    assert _engine_imports(src) == {"records", "storage", "consumer"}
