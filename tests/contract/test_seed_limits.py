"""The limits-stream seed (seeds/000_4ee57bae325a3c83.txt), replayed step by step.

The seed creates ``events`` on ``events.*``, publishes six empty messages,
then tightens the limits with three update_stream calls (max_msgs=10, then
max_bytes=300, then max_age=0.1 s) and looks at streams_info after each
step.  Neither max_msgs=10 nor max_bytes=300 trims anything (six messages of
296 bytes in the file store, 212 in the memory store); max_age=0.1 empties
the stream once the messages are older than that.  The seed used file
storage; here it runs on every backend's storage.  Checked against
nats-server v2.15.1.
"""

from __future__ import annotations

import pytest

from jetspark.api import DiscardPolicy
from jetspark.errors import APIError

PUBLISHES = [
    "events.page_loaded",
    "events.mouse_clicked",
    "events.mouse_clicked",
    "events.page_loaded",
    "events.mouse_clicked",
    "events.input_focused",
]
SIX_MESSAGES_BYTES = {"file": 296, "memory": 212}


def only_stream(js):
    """streams_info, as the seed prints it: exactly the one stream."""
    infos = js.streams_info()
    assert [info.config.name for info in infos] == ["events"]
    return infos[0]


def assert_six_messages(js, state):
    assert state.messages == 6
    assert state.bytes == SIX_MESSAGES_BYTES[js.storage]
    assert state.bytes == sum(js.msg_bytes(subject, b"") for subject in PUBLISHES)
    assert (state.first_seq, state.last_seq) == (1, 6)
    assert state.num_subjects == 3
    assert state.num_deleted == 0


def test_limits_stream_seed(js):
    # Create 'events' on 'events.*' and publish 6 messages.
    info = js.add_stream(name="events", subjects=["events.*"])
    assert info.config.subjects == ["events.*"]
    for seq, subject in enumerate(PUBLISHES, start=1):
        ack = js.publish(subject, b"")
        assert (ack.stream, ack.seq) == ("events", seq)

    info = only_stream(js)
    assert_six_messages(js, info.state)
    assert (info.config.max_msgs, info.config.max_bytes, info.config.max_age) == (-1, -1, 0)
    assert js.stream_info("events", subjects_filter=">").state.subjects == {
        "events.page_loaded": 2,
        "events.mouse_clicked": 3,
        "events.input_focused": 1,
    }
    first_ts = info.state.first_ts
    last_ts = info.state.last_ts
    assert first_ts == js.get_msg("events", 1).time
    assert last_ts == js.get_msg("events", 6).time

    # max_msgs=10: nothing to trim.
    updated = js.update_stream(name="events", subjects=["events.*"], max_msgs=10)
    assert (updated.config.max_msgs, updated.config.max_bytes, updated.config.max_age) == (10, -1, 0)
    assert updated.config.discard == DiscardPolicy.OLD
    assert_six_messages(js, updated.state)
    info = only_stream(js)
    assert info.config.max_msgs == 10
    assert_six_messages(js, info.state)

    # max_bytes=300: the six messages fit (296 file, 212 memory).
    updated = js.update_stream(name="events", subjects=["events.*"], max_msgs=10, max_bytes=300)
    assert (updated.config.max_msgs, updated.config.max_bytes, updated.config.max_age) == (10, 300, 0)
    assert_six_messages(js, updated.state)
    info = only_stream(js)
    assert info.config.max_bytes == 300
    assert_six_messages(js, info.state)

    # max_age=0.1 s: the duplicate window (default 2 min) shrinks to max_age.
    updated = js.update_stream(name="events", subjects=["events.*"], max_msgs=10, max_bytes=300, max_age=0.1)
    assert (updated.config.max_msgs, updated.config.max_bytes, updated.config.max_age) == (10, 300, 0.1)
    assert updated.config.duplicate_window == 0.1
    assert_six_messages(js, updated.state)
    info = only_stream(js)
    assert info.config.max_age == 0.1
    assert_six_messages(js, info.state)
    assert (info.state.first_ts, info.state.last_ts) == (first_ts, last_ts)

    # Once the messages are older than max_age the stream is empty:
    # first_seq = last_seq + 1, last_seq and last_ts kept, first_ts zero.
    js.clock.advance(0.1 + 0.5)
    state = only_stream(js).state
    assert state.messages == 0
    assert state.bytes == 0
    assert (state.first_seq, state.last_seq) == (7, 6)
    assert state.first_ts is None
    assert state.last_ts == last_ts
    assert state.num_subjects == 0
    assert state.num_deleted == 0
    with pytest.raises(APIError) as excinfo:
        js.get_msg("events", 6)
    assert (excinfo.value.err_code, excinfo.value.description) == (10037, "no message found")

    # Delete the stream; the recorded run of the seed ended with a delete of a
    # stream that no longer existed: NotFoundError, code=404, err_code=10059.
    assert js.delete_stream("events") is True
    assert js.stream_names() == []
    with pytest.raises(APIError) as excinfo:
        js.delete_stream("events")
    err = excinfo.value
    assert (err.code, err.err_code, err.description) == (404, 10059, "stream not found")
