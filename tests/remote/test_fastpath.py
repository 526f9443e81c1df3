"""The private nats-py hooks of the bulk paths (jetspark/remote/fastpath.py) and their public fallback.

If a nats-py release changes the internals the hooks rely on, the first tests fail
loudly here (the bulk paths would silently fall back to the slower public path);
the others check that the public path gives the same results as the hooks.
"""

from __future__ import annotations

import asyncio
import inspect

import pyarrow as pa
import pytest
from nats.aio.client import Client as NATS

from jetspark.api import AckPolicy
from jetspark.remote import fastpath
from tests.remote.tls_certs import make_certs

EXPECTED = {
    "_process_msg": ["self", "sid", "subject", "reply", "data", "headers"],
    "_process_headers": ["self", "headers"],
    "_send_command": ["self", "cmd", "priority"],
    "_flush_pending": ["self", "force_flush"],
}


@pytest.mark.parametrize("method", sorted(EXPECTED))
def test_the_nats_py_internals_the_hooks_override_are_still_there(method):
    fn = getattr(NATS, method, None)
    assert fn is not None, f"nats-py's Client.{method} is gone: jetspark/remote/fastpath.py needs a look"
    assert inspect.iscoroutinefunction(fn), f"nats-py's Client.{method} is no longer a coroutine function"
    assert list(inspect.signature(fn).parameters) == EXPECTED[method], f"nats-py's Client.{method} has a new signature"
    assert fastpath.RAW_DELIVERY and fastpath.RAW_WRITES and fastpath._RAW_HEADERS


def _run(js, coro):
    return js._session.loop.run(coro, 30)


def test_raw_deliveries_take_the_hook_and_match_the_public_path(js, name):
    """The same deliveries (headers, repeated keys, a status line, no payload) through the hook
    and through nats-py's public subscription callback arrive as identical tuples."""
    subject = f"raw.{name()}"
    blocks = [None, None, b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n", b"NATS/1.0 503\r\nB:  spaced \r\n\r\n"]
    messages = [(b"r.1", b"abc"), (b"", b""), (b"", b"xy"), (b"r.2", b"")]
    lines = []
    for (reply, data), hdr in zip(messages, blocks):
        to = subject.encode() + (b" " + reply if reply else b"")
        if hdr is None:
            lines.append(b"PUB %b %d\r\n%b\r\n" % (to, len(data), data))
        else:
            lines.append(b"HPUB %b %d %d\r\n%b%b\r\n" % (to, len(hdr), len(hdr) + len(data), hdr, data))

    async def scenario():
        nc = await js._session.ready()
        got: dict[bool, list] = {True: [], False: []}
        done = {True: asyncio.Event(), False: asyncio.Event()}

        def collect(fast):
            def handler(*raw):
                got[fast].append(raw)
                if len(got[fast]) == len(lines):
                    done[fast].set()

            return handler

        fast = await fastpath.subscribe_raw(nc, subject, collect(True))
        public = await fastpath.subscribe_raw(nc, subject, collect(False), public=True)
        write = fastpath.raw_writer(nc)
        assert (fast.fast, public.fast, write is not None) == (True, False, True)
        await write(b"".join(lines))
        await asyncio.wait_for(asyncio.gather(done[True].wait(), done[False].wait()), 10)
        await fast.unsubscribe()
        await public.unsubscribe()
        return got

    got = _run(js, scenario())
    assert got[True] == got[False]
    assert got[True] == [(subject.encode(), reply, data, hdr) for (reply, data), hdr in zip(messages, blocks)]


def test_without_the_raw_writer_publish_batch_stores_the_same(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    rows = pa.table({"subject": [f"{s}.{i % 3}" for i in range(300)], "data": [b"x%d" % i for i in range(300)]})
    hooked = js.publish_batch(rows, stream=s)
    js._session.public_path = True
    public = js.publish_batch(rows, stream=s)
    assert public.seqs.to_pylist() == [q + 300 for q in hooked.seqs.to_pylist()]
    batches = pa.Table.from_batches(list(js.read_batches(s)))
    assert batches.column("data").to_pylist()[:300] == batches.column("data").to_pylist()[300:]
    assert batches.column("subject").to_pylist()[:300] == batches.column("subject").to_pylist()[300:]


def test_fetch_and_acks_on_the_public_path_match_the_hooks(js, name):
    results = {}
    for public in (False, True):
        s = name()
        js._session.public_path = public
        js.add_stream(name=s, subjects=[f"{s}.>"])
        for i in range(20):
            js.publish(f"{s}.{i}", b"m%d" % i, headers={"K": str(i)} if i % 2 else None)
        sub = js.pull_subscribe(f"{s}.>", durable="d", stream=s, config=None)
        msgs = sub.fetch(15, timeout=2)
        for m in msgs[:10]:
            m.ack()
        info = js.consumer_info(s, "d")
        results[public] = (
            [(m.subject.split(".", 1)[1], m.data, m.headers, m.metadata.sequence.stream) for m in msgs],
            info.ack_floor.stream_seq,
            info.num_ack_pending,
        )
        assert js.consumer_info(s, "d").config.ack_policy == AckPolicy.EXPLICIT
    assert results[True] == results[False]
    assert results[False][1:] == (10, 5)


def test_the_consumer_of_a_nats_py_push_subscription_is_where_subscription_consumer_reads_it(js, name):
    """An ordered push subscription reports the consumer nats-py is on (jetspark/remote/push.py),
    read from nats-py's private ``_consumer`` (fastpath.subscription_consumer)."""
    stream = name()
    js.add_stream(name=stream, subjects=[f"{stream}.>"])
    js.publish(f"{stream}.a", b"x")
    sub = js.subscribe(f"{stream}.>", ordered_consumer=True)
    try:
        assert sub.next_msg(timeout=5).data == b"x"
        got = fastpath.subscription_consumer(sub._psub)
        assert got is not None, (
            "nats-py's PushSubscription no longer keeps _consumer: jetspark/remote/fastpath.py needs a look"
        )
        assert [c.name for c in js.consumers_info(stream)] == [got] == [sub.consumer]
    finally:
        sub.unsubscribe()
        js.delete_stream(stream)


def test_nats_py_read_loop_still_hands_every_read_to_its_parser():
    """fastpath.FrameFeed stands in for nats-py's parser (Client._ps): this fails loudly when a
    nats-py release stops feeding it from the read loop or renames what it calls back."""
    import nats.aio.client as nats_client
    from nats.protocol.parser import Parser

    assert "self._ps.parse(" in inspect.getsource(NATS._read_loop), (
        "nats-py's read loop no longer calls self._ps.parse: fastpath.FrameFeed needs a look"
    )
    assert list(inspect.signature(Parser.parse).parameters) == ["self", "data"], (
        "nats-py's Parser.parse has a new signature"
    )
    assert callable(getattr(Parser, "reset", None))
    for method in ("_process_ping", "_process_pong", "_process_info", "_process_err"):
        assert inspect.iscoroutinefunction(getattr(NATS, method, None)), f"nats-py's Client.{method} is gone"
    assert isinstance(nats_client.DEFAULT_BUFFER_SIZE, int)
    assert fastpath.FRAME_FEED


def test_frames_reach_a_bulk_subscription_through_the_feed_and_match_the_raw_hook(js, name):
    """Deliveries of one subject reach a subscribe_frames handler as runs of frames whose spans
    hold exactly what subscribe_raw hands over; a request on the same connection still works
    (its reply goes where nats-py's parser would send it)."""
    subject = f"frames.{name()}"
    blocks = [None, b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n", None, b"NATS/1.0 409 Batch Completed\r\n\r\n"]
    messages = [(b"r.1", b"abc"), (b"", b"\r\nMSG x 1 2\r\n"), (b"r.2", b""), (b"", b"")]
    lines = []
    for (reply, data), hdr in zip(messages, blocks):
        to = subject.encode() + (b" " + reply if reply else b"")
        if hdr is None:
            lines.append(b"PUB %b %d\r\n%b\r\n" % (to, len(data), data))
        else:
            lines.append(b"HPUB %b %d %d\r\n%b%b\r\n" % (to, len(hdr), len(hdr) + len(data), hdr, data))
    lines = lines * 500

    async def scenario():
        nc = await js._session.ready()
        assert isinstance(nc._ps, fastpath.FrameFeed)
        raw, runs = [], []
        inbox = await fastpath.FrameInbox().open(nc, subject)
        assert inbox.fast
        await fastpath.raw_writer(nc)(b"".join(lines))
        got = []
        while len(got) < len(lines):
            for buf, f in await inbox.take(10):
                runs.append(len(f))
                for sl, sh, rl, rh, hl, dl, dh in zip(
                    *(
                        getattr(f, c).tolist()
                        for c in ("subj_lo", "subj_hi", "reply_lo", "reply_hi", "hdr_lo", "data_lo", "data_hi")
                    )
                ):
                    got.append((buf[sl:sh], buf[rl:rh], buf[dl:dh], buf[hl:dl] or None))
        info = await js._session.api(f"{js._session.api_prefix}.INFO", what="account info")
        await inbox.close()
        done = asyncio.Event()

        def collect(*t):
            raw.append(t)
            if len(raw) == len(lines):
                done.set()

        sub = await fastpath.subscribe_raw(nc, subject, collect)
        await fastpath.raw_writer(nc)(b"".join(lines))
        await asyncio.wait_for(done.wait(), 10)
        await sub.unsubscribe()
        return got, raw, runs, info

    got, raw, runs, info = _run(js, scenario())
    assert got == raw == [(subject.encode(), reply, data, hdr) for (reply, data), hdr in zip(messages, blocks)] * 500
    assert max(runs) > 1  # many frames per run: no call per message
    assert "memory" in info or "limits" in info


def test_a_range_read_on_the_public_path_matches_the_frame_path(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    rows = pa.table(
        {"subject": [f"{s}.{i % 5}" for i in range(3000)], "data": [b"d%d" % i * (i % 7) for i in range(3000)]}
    )
    js.publish_batch(rows, stream=s)
    js.publish(f"{s}.h", b"with headers", headers={"K": "v"})
    fast = pa.Table.from_batches(list(js.read_batches(s, 2, 3001, batch_size=1000, headers=True)))
    js._session.public_path = True
    public = pa.Table.from_batches(list(js.read_batches(s, 2, 3001, batch_size=1000, headers=True)))
    assert fast.equals(public)
    assert fast.column("seq").to_pylist() == list(range(2, 3002))
    assert fast.column("data").to_pylist()[-1] == b"with headers"
    assert fast.column("headers").to_pylist()[-1] == [("K", ["v"])]


def test_the_feed_keeps_full_reads_until_the_reads_come_short_or_the_loop_falls_idle():
    """A read as long as nats-py's read size is kept (more is likely waiting); a short read
    frames everything kept, and so do a few turns of the event loop without a read (IDLE_TURNS):
    nothing waits for traffic that may never come."""
    import nats.aio.client as nats_client

    from tests.remote.test_frames import _Recorder, nats_py_events

    size = nats_client.DEFAULT_BUFFER_SIZE
    data = b"".join(b"MSG s.%d 7 r.%d 3\r\nabc\r\nPING\r\n" % (i, i) for i in range(4 * size // 20))
    reads = [data[i : i + size] for i in range(0, len(data), size)]
    assert len(reads[0]) == size and len(reads[-1]) < size

    async def scenario():
        rec = _Recorder()
        feed = fastpath.FrameFeed(rec)
        await feed.parse(reads[0])
        await feed.parse(reads[1])
        kept = list(rec.events)
        await asyncio.sleep(0)
        one_turn = list(rec.events)  # (one turn without a read: the next may still come)
        for _ in range(fastpath.IDLE_TURNS + 2):
            await asyncio.sleep(0)  # the loop falls idle: the kept reads are framed
        idle = list(rec.events)
        for r in reads[2:]:
            await feed.parse(r)
        return kept, one_turn, idle, rec.events

    kept, one_turn, idle, events = asyncio.run(scenario())
    assert kept == one_turn == []
    assert idle == nats_py_events([reads[0] + reads[1]])
    assert events == nats_py_events(reads)


def test_the_feed_gathers_full_reads_that_come_a_loop_turn_apart_into_one_framing_pass():
    """nats-py's read loop hands over a socket read in steps of its read size, then waits a loop
    turn for the next: full reads coming one turn apart are still gathered (up to STASH_BYTES)
    and framed at once, so one framing pass covers many frames; what they hold reads as
    nats-py reads it."""
    import nats.aio.client as nats_client

    from jetspark.protocol.frames import FrameReader
    from tests.remote.test_frames import _Recorder, nats_py_events

    size = nats_client.DEFAULT_BUFFER_SIZE
    data = b"".join(b"MSG s.%d 7 r.%d 3\r\nabc\r\n" % (i, i) for i in range(8 * size // 20))
    reads = [data[i : i + size] for i in range(0, len(data), size)]
    assert len(reads) >= 8 and len(reads[-1]) < size
    passes = []

    async def scenario():
        rec = _Recorder()
        feed = fastpath.FrameFeed(rec)

        class Counted(FrameReader):
            def feed(self, chunk):
                passes.append(sum(map(len, chunk)) if isinstance(chunk, list) else len(chunk))
                return super().feed(chunk)

        feed.reader = Counted()
        for r in reads[:-1]:
            await feed.parse(r)
            await asyncio.sleep(0)  # the read loop waits a turn for the socket's next read
        before_short = list(rec.events)
        await feed.parse(reads[-1])
        return before_short, rec.events

    before_short, events = asyncio.run(scenario())
    assert before_short == []
    assert passes == [len(data)]
    assert events == nats_py_events(reads)


def test_the_nats_py_internals_the_bulk_transport_relies_on_are_still_there():
    """fastpath.BulkTcpTransport stands in for nats-py's TcpTransport on our Client's connections:
    this fails loudly when a nats-py release changes how a connection makes its transport or what
    the transport keeps (reads would silently go back to 32 KiB a call)."""
    from nats.aio.transport import TcpTransport

    assert list(inspect.signature(NATS._connect_to_server).parameters) == ["self", "s"]
    assert fastpath._connects_with_tcp_transport(), (
        "nats-py's Client._connect_to_server makes its transport differently: fastpath.BulkTcpTransport needs a look"
    )
    assert fastpath._tcp_transport_keeps_streams(), "nats-py's TcpTransport keeps its streams elsewhere"
    for method, params in {
        "connect": ["self", "uri", "buffer_size", "connect_timeout"],
        "connect_tls": ["self", "uri", "ssl_context", "buffer_size", "connect_timeout"],
        "read": ["self", "buffer_size"],
    }.items():
        assert list(inspect.signature(getattr(TcpTransport, method)).parameters) == params, f"TcpTransport.{method}"
    assert fastpath.BULK_READS


def test_the_bulk_transport_reads_up_to_a_mebibyte_without_pausing_the_socket_unlike_nats_py_s():
    """1.5 MiB waiting in the connection's StreamReader: the bulk transport hands it over in two
    reads with the socket still read from; nats-py's own transport (which its clients keep) in
    32 KiB reads, the socket paused meanwhile.  Both give back exactly the bytes received."""
    from urllib.parse import urlparse

    import nats.aio.client as nats_client
    from nats.aio.transport import TcpTransport

    size = nats_client.DEFAULT_BUFFER_SIZE
    data = bytes(range(256)) * (6 * 1024)

    async def scenario():
        peers = []
        server = await asyncio.start_server(lambda r, w: peers.append(w), "127.0.0.1", 0)
        uri = urlparse("nats://127.0.0.1:%d" % server.sockets[0].getsockname()[1])
        out = {}
        for cls in (fastpath.BulkTcpTransport, TcpTransport):
            t = cls()
            await t.connect(uri, size, 5)
            t._io_reader.feed_data(data)
            reading = t._io_writer.transport.is_reading()
            reads = []
            while sum(map(len, reads)) < len(data):
                reads.append(await t.read(size))
            out[cls] = (reading, [len(r) for r in reads], b"".join(reads) == data)
            t.close()
            await t.wait_closed()
        for w in peers:
            w.close()
        server.close()
        await server.wait_closed()
        return out

    out = asyncio.run(scenario())
    assert out[fastpath.BulkTcpTransport] == (True, [fastpath.READ_BYTES, len(data) - fastpath.READ_BYTES], True)
    assert out[TcpTransport] == (False, [size] * (len(data) // size), True)
    assert nats_client.DEFAULT_BUFFER_SIZE == size  # (nothing changed nats-py's module for other clients)


def test_a_nats_py_client_in_the_same_process_keeps_its_own_transport_and_parser(js, server, name):
    """Our connection reads through the bulk transport and the frame feed; a user's own nats-py
    client beside it in the same process and event loop keeps nats-py's transport, parser and
    read size, and both exchange large payloads intact either way."""
    import nats
    import nats.aio.client as nats_client
    from nats.aio.transport import TcpTransport
    from nats.protocol.parser import Parser

    subject = f"mixed.{name()}"
    payloads = [bytes([i]) * (600_000 + i) for i in range(3)]

    async def exchange(sender, receiver):
        got = []
        done = asyncio.Event()

        async def cb(msg):
            got.append(msg.data)
            if len(got) == len(payloads):
                done.set()

        sub = await receiver.subscribe(subject, cb=cb)
        await receiver.flush()
        for p in payloads:
            await sender.publish(subject, p)
        await sender.flush()
        await asyncio.wait_for(done.wait(), 20)
        await sub.unsubscribe()
        return got

    async def scenario():
        ours = await js._session.ready()
        theirs = await nats.connect(server.url)
        try:
            kinds = (type(ours._transport), type(ours._ps), ours._ps.full, type(theirs._transport), type(theirs._ps))
            feeds = (fastpath.frame_feed(ours) is ours._ps, fastpath.frame_feed(theirs))
            return kinds, feeds, await exchange(ours, theirs), await exchange(theirs, ours)
        finally:
            await theirs.close()

    kinds, feeds, to_theirs, to_ours = _run(js, scenario())
    assert kinds == (fastpath.BulkTcpTransport, fastpath.FrameFeed, fastpath.RECV_BYTES, TcpTransport, Parser)
    # publish_batch's PubAck framer stands in only where our frame feed is (fastpath.frame_feed).
    assert feeds == (True, None)
    assert to_theirs == to_ours == payloads
    assert nats_client.DEFAULT_BUFFER_SIZE == 32768  # nats-py's own read size, as it ships


def test_range_reads_over_tls_go_through_the_bulk_transport(start_server, tmp_path, name):
    """A TLS connection reads through the bulk transport too (its StreamReader made anew after the
    handshake): a range read of ~4 MiB over TLS gives the same table as the public path."""
    import jetspark

    make_certs(tmp_path, "server")
    srv = start_server("--tls", "--tlscert", str(tmp_path / "server.pem"), "--tlskey", str(tmp_path / "server.key"))
    with jetspark.connect(srv.url, tls_ca=str(tmp_path / "ca.pem"), timeout=5) as js:
        s = name()
        js.add_stream(name=s, subjects=[f"{s}.>"])
        rows = pa.table(
            {"subject": [f"{s}.{i % 3}" for i in range(4000)], "data": [b"%04d" % i * 250 for i in range(4000)]}
        )
        js.publish_batch(rows, stream=s)

        async def transport():
            nc = await js._session.ready()
            t = nc._transport
            return type(t), t._io_reader is not t._bare_io_reader, nc._ps.full

        assert _run(js, transport()) == (fastpath.BulkTcpTransport, True, fastpath.RECV_BYTES)
        fast = pa.Table.from_batches(list(js.read_batches(s, 1, 4000, batch_size=1000)))
        js._session.public_path = True
        public = pa.Table.from_batches(list(js.read_batches(s, 1, 4000, batch_size=1000)))
    assert fast.equals(public)
    assert fast.column("data").to_pylist() == rows.column("data").to_pylist()


def test_after_a_server_restart_the_connection_reads_through_the_bulk_transport_again(start_server, name):
    """nats-py reconnects on the transport it has: ours connects anew (a new StreamReader) and a
    range read of ~2 MiB after the restart gives every message."""
    import jetspark

    srv = start_server()
    with jetspark.connect(srv.url, timeout=1, reconnect_time_wait=0.2) as js:
        s = name()
        js.add_stream(name=s, subjects=[f"{s}.>"])

        async def transport():
            nc = await js._session.ready()
            return nc._transport, nc._transport._io_reader, nc._ps.full

        t, reader, _ = _run(js, transport())
        srv.kill()
        srv.start()  # same port, same store: the next call waits for the reconnect
        rows = pa.table({"subject": [f"{s}.x"] * 2000, "data": [b"%05d" % i * 200 for i in range(2000)]})
        js.publish_batch(rows, stream=s)
        t2, reader2, full = _run(js, transport())
        got = pa.Table.from_batches(list(js.read_batches(s, 1, 2000, batch_size=500)))
    assert type(t) is fastpath.BulkTcpTransport and t2 is t and reader2 is not reader
    assert full == fastpath.RECV_BYTES
    assert got.column("data").to_pylist() == rows.column("data").to_pylist()
