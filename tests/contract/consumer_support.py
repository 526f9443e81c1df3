"""Helpers shared by the consumer contract tests (test_consumer_*.py, test_interest_workqueue.py).

Time on the server backends is real: ``js.clock.advance(s)`` sleeps there and
moves the engine's injected clock instantly.  Timed tests keep durations
short (0.2-0.6 s) and advance ~0.1 s past each deadline, because the
server's timers fire a few milliseconds late.
"""

from __future__ import annotations

import contextlib
import os
import time

import pytest

import jetspark.errors
from jetspark.errors import APIError, FetchTimeoutError

# A fetch that is expected to find nothing waits this long (on the server, for real).
NOTHING_WAIT = 0.05

# HTTP-like status the server pairs with each err_code, as nats-server v2.15.1 answers.
HTTP_CODE = {
    10012: 500,  # "... can not be updated", "error creating store for consumer"
    10013: 400,
    10014: 404,
    10017: 400,
    10026: 400,
    10052: 500,
    10059: 404,
    10074: 500,
    10079: 400,
    10080: 400,
    10081: 400,
    10082: 400,
    10083: 400,
    10084: 400,
    10088: 400,
    10089: 400,
    10094: 400,
    10098: 400,
    10099: 400,
    10100: 400,
    10101: 400,
    10102: 400,
    10107: 400,
    10108: 400,
    10112: 400,
    10116: 400,
    10127: 400,
    10133: 400,
    10136: 400,
    10138: 400,
    10139: 400,
    10148: 400,
    10149: 400,
    10183: 400,
}


@pytest.fixture(autouse=True)
def server_streams_removed(request):
    """Wait until the reference server has removed the previous test's streams.

    nats-server answers a stream delete before the file store's directory is
    gone; re-creating the same name in that window brings the old messages
    back or fails with 10049.  (Import this into a test module to use it.)
    """
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or not callspec.params.get("backend", "").startswith(("nats", "oracle")):
        return
    server = request.getfixturevalue("nats_server")
    streams = os.path.join(server.store_dir, "jetstream", "$G", "streams")
    deadline = time.monotonic() + 5
    while os.path.isdir(streams) and os.listdir(streams) and time.monotonic() < deadline:
        time.sleep(0.001)


def add_stream(js, **config):
    """``js.add_stream(**config)``, riding out a nats-server store race.

    Right after a stream delete, nats-server removes the account's empty
    ``streams`` directory; a file stream created in that moment fails with
    10049 "error creating store for stream" (~2% of creations straight after
    a delete, whatever the test waits for first).  That is the reference's
    housekeeping, not behaviour under test, so the server backend retries.
    """
    for _ in range(40):
        try:
            return js.add_stream(**config)
        except APIError as e:
            if not (js.is_server and e.err_code == 10049):
                raise
            time.sleep(0.025)
    return js.add_stream(**config)


@contextlib.contextmanager
def api_error(err_code: int, description: str):
    """Expect a jetspark APIError with exactly this err_code, HTTP code and description."""
    with pytest.raises(jetspark.errors.APIError) as e:
        yield e
    err = e.value
    assert (err.err_code, err.code, err.description) == (err_code, HTTP_CODE[err_code], description), str(err)


def seqs(info):
    """A ConsumerInfo's (delivered, ack_floor) as (consumer_seq, stream_seq) pairs."""
    return (
        (info.delivered.consumer_seq, info.delivered.stream_seq),
        (info.ack_floor.consumer_seq, info.ack_floor.stream_seq),
    )


def before_acks(js, initial):
    """The (delivered, ack_floor) a new consumer reports until something is acknowledged:
    ``initial`` on one server (and the engine), the ack floor (0, 0) on the cluster, where a
    replicated consumer reports no floor before its first ack (nats-server 2.15; the oracle
    on the cluster, ``oracle-cluster``, reports the same)."""
    return (initial[0], (0, 0)) if js.replicas > 1 else initial


def not_on_the_cluster(js, why: str) -> None:
    """Skip a test on the cluster backends, saying why: where a replicated consumer's
    answer depends on timing (the same test gives different counts run to run, for the
    oracle as for jetspark), there is no one answer to check."""
    if js.replicas > 1:
        pytest.skip(f"not on the cluster: {why}")


def counts(info):
    """(num_ack_pending, num_redelivered, num_pending, num_waiting)."""
    return (info.num_ack_pending, info.num_redelivered, info.num_pending, info.num_waiting)


def meta(msg):
    """A delivered message as (subject, stream seq, consumer seq, num_delivered, num_pending)."""
    md = msg.metadata
    return (msg.subject, md.sequence.stream, md.sequence.consumer, md.num_delivered, md.num_pending)


def fetch_nothing(sub, batch: int = 10) -> None:
    with pytest.raises(FetchTimeoutError):
        sub.fetch(batch, timeout=NOTHING_WAIT)
    # A server holds a pull request until its expiry, which nats-py sets about at the
    # client's timeout: consumer_info can count it in num_waiting for a moment after the
    # fetch gave up (seen under load, on the oracle).  The engine has no such request.
    deadline = time.monotonic() + 2.0
    while sub.consumer_info().num_waiting and time.monotonic() < deadline:
        time.sleep(0.005)


def state(js, stream: str):
    """(messages, first_seq, last_seq, consumer_count) of a stream."""
    s = js.stream_info(stream).state
    return (s.messages, s.first_seq, s.last_seq, s.consumer_count)


def eventually(js, read, expected, timeout: float = 2.0):
    """Assert ``read() == expected``, giving the server time for work it does after answering.

    Two things nats-server does on goroutines of their own, after the publish
    or delete has been answered: it settles a pending message that the
    *stream* removed (limits, delete_msg: ``decStreamPending`` ->
    ``processTerm``), and it counts a newly stored message into a consumer's
    num_pending when the stream's signal reaches the consumer (a
    consumer_info straight after a publish lagged 2 times in 1000; the
    num_pending in a delivered message's metadata lags alike, so tests that
    check it for messages published after the consumer was created wait
    here first).  The engine must be exact at once.
    """
    settles(read, expected, timeout if js.is_server else 0)


def settles(read, expected, timeout: float) -> None:
    """Assert ``read() == expected`` within ``timeout`` seconds (``eventually`` for a handle
    known to be on a server)."""
    deadline = time.monotonic() + timeout
    while True:
        got = read()
        if got == expected or time.monotonic() >= deadline:
            break
        time.sleep(0.005)
    assert got == expected, f"{got!r} != {expected!r}"
