"""jetspark's demo: a Spark streaming pipeline on the embedded engine.

``python -m jetspark.demo [--store DIR] [--seconds N] [--rate R]`` (also ``jetspark demo``)

- A publisher thread plays a web shop: orders are created, paid (a few
  cancelled) and shipped in three regions, as JSON messages on
  ``orders.<region>.<event>`` (events created/paid/cancelled/shipped) in the
  stream EVENTS, appended with ``publish_batch``.  Every message carries a
  ``Nats-Msg-Id``; a few are sent twice (a client retrying), and the
  stream's duplicate window drops the copies.
- A Spark structured-streaming query reads EVENTS through
  ``format("jetstream")`` with the durable consumer ``demo-revenue``, parses
  the JSON, sums each micro-batch per region (orders created, paid,
  cancelled, shipped, revenue) and writes one message per region and batch to the
  stream METRICS through the jetstream sink.  The aggregation is stateless:
  each micro-batch is summed on its own (one partition, ``mapInArrow``), so
  no state store and no watermark are involved.
- One line per micro-batch shows the rows, rows/s, the source offsets, the
  consumer's ack floor and the state of both streams; a summary ends it.

The store is ``./jetspark-data`` unless ``--store`` says otherwise; EVENTS
and METRICS are deleted and created again at the start of every run, and
stay afterwards for a look (``jetspark.connect(DIR).stream_info("METRICS")``).
The query's checkpoint lives in a temporary directory that is removed.

Modules: this one (the pipeline, its publisher and progress lines) and ``terminal``
(Ctrl-C and the JVM's startup chatter on stderr).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import jetspark
from jetspark import ConsumerNotFoundError, StreamNotFoundError
from jetspark.connection import is_server_url
from jetspark.demo.terminal import CtrlC, quiet_jvm_startup

if TYPE_CHECKING:
    from jetspark.backend import JetStreamAPI

EVENTS = "EVENTS"
METRICS = "METRICS"
CONSUMER = "demo-revenue"
DEFAULT_STORE = "./jetspark-data"
REGIONS = ("eu", "us", "apac")
# Publishes per second; every tick appends one batch.
TICKS_PER_SECOND = 10
DUPLICATE_RATE = 0.02

# The parsed payload.  Spark reads JSON numbers into these types.
EVENT_SCHEMA = "order_id string, event string, region string, customer string, items int, amount double, at string"
# What the per-batch aggregation returns: exactly the sink's columns.
SINK_SCHEMA = "subject string, data string, msg_id string"


def main(argv: Optional[Sequence[str]] = None, *, on_publishing: Optional[Callable[[Publisher], None]] = None) -> int:
    """The demo; ``on_publishing(publisher)`` runs once the publisher has started (make
    demo-cluster kills and restarts a node from there: scripts/demo_cluster.py)."""
    args = _parse_args(argv)
    t0 = time.monotonic()
    print(f"jetspark {jetspark.__version__} demo: shop events -> Spark -> revenue per region and micro-batch")
    print(f"store {args.store}   publishing {args.rate:,} events/s for {args.seconds:g}s")

    js = jetspark.connect(args.store)
    spark = query = None
    publisher = Publisher(args.store, rate=args.rate, seconds=args.seconds, seed=args.seed)
    checkpoint = tempfile.mkdtemp(prefix="jetspark-demo-checkpoint-")
    monitor = Monitor(js)
    interrupted = threading.Event()
    ctrl_c = CtrlC(interrupted)
    status = 0
    try:
        # A Ctrl-C only sets the flag, checked between steps: raised inside a call into the
        # JVM, KeyboardInterrupt leaves py4j logging tracebacks.
        ctrl_c.install()
        _reset_streams(js, args.replicas)
        print("starting Spark (local[2]) ...", flush=True)
        spark = _start_spark(ctrl_c, interrupted)
        _stop_if(interrupted)
        _warm_up(spark)
        _stop_if(interrupted)
        query = _start_query(spark, args.store, checkpoint, args.trigger)
        _first_trigger(query, interrupted)
        _stop_if(interrupted)
        print(
            f"query reads {EVENTS} with durable consumer {CONSUMER}, writes {METRICS}; "
            f"trigger every {args.trigger:g}s   (Spark ready after {time.monotonic() - t0:.1f}s)\n"
        )
        monitor.header()
        publisher.start()
        if on_publishing is not None:
            on_publishing(publisher)
        # The UI loop: wait on the query a little at a time, print each finished batch.
        while publisher.is_alive() and not interrupted.is_set():
            if query.awaitTermination(0.25):
                break  # the query ended by itself: awaitTermination raised if it failed
            monitor.show(query)
        _stop_if(interrupted)
        publisher.join()
        if publisher.error is not None:
            raise publisher.error
        if query.isActive:
            monitor.show(query)
            print(f"-- publisher done ({publisher.published:,} events); draining what is left ...")
            query.processAllAvailable()
            monitor.show(query)
    except KeyboardInterrupt:
        ctrl_c.announce()
        status = 130
    except Exception as exc:  # noqa: BLE001 - the demo reports any failure in one line and cleans up
        if interrupted.is_set():
            # Spark's Python workers got the Ctrl-C too (the terminal's process group): the
            # job or query they ran fails because of it, and that is the interruption.
            status = 130
        else:
            print(f"\nthe demo failed: {type(exc).__name__}: {_first_line(exc)}")
            status = 1
    finally:
        publisher.stop()
        if publisher.ident is not None:
            publisher.join()
        if query is not None:
            try:
                query.stop()
            except Exception:  # noqa: BLE001 - already reported; go on stopping
                pass
        if spark is not None:
            spark.stop()
        ctrl_c.restore()
        shutil.rmtree(checkpoint, ignore_errors=True)

    try:
        if status in (0, 130):
            _summary(js, publisher, monitor, time.monotonic() - t0)
            _next_steps(args.store)
    except StreamNotFoundError:
        pass  # interrupted before the streams were made: nothing to sum up
    finally:
        js.close()
    return status


def _stop_if(interrupted: threading.Event) -> None:
    """Go no further once Ctrl-C was pressed: the demo winds down from here."""
    if interrupted.is_set():
        raise KeyboardInterrupt


def _start_spark(ctrl_c: "CtrlC", interrupted: threading.Event):
    """The Spark session, started so that a Ctrl-C need not wait for all of it.

    While the JVM launches, a Ctrl-C only sets the flag: PySpark interrupted there can
    leave a JVM that never exits.  Once the JVM runs (``jvm_started``) it exits when this
    process does, and nothing else runs yet that would need winding down, so from then on
    a Ctrl-C stops the start at once (``ctrl_c.immediate``) rather than after the seconds
    the SparkContext takes.  Once the SparkContext exists, PySpark's own SIGINT handler is
    in place (cancel the jobs, raise KeyboardInterrupt).  An interrupted py4j call logs a
    traceback, so the root logger is silenced meanwhile (a real failure raises, and the
    demo prints it in one line); the demo's handler is put back afterwards."""
    from jetspark.connector import session  # pyspark: loaded only when the demo runs

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.CRITICAL)

    def jvm_started() -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        ctrl_c.immediate = True

    try:
        with quiet_jvm_startup():
            return session.local_session(
                "jetspark-demo", jvm_started=jvm_started, **{"spark.ui.showConsoleProgress": "false"}
            )
    finally:
        ctrl_c.immediate = False
        root.setLevel(level)
        ctrl_c.install()


def _warm_up(spark) -> None:
    """Start Spark's Python workers (one per core) and compile a first Arrow job, so the
    query's first micro-batch is not the one that pays for them."""
    spark.range(0, 4, numPartitions=2).mapInArrow(_passthrough, "id long").collect()


def _passthrough(batches):
    yield from batches


def _first_trigger(query, interrupted: threading.Event) -> None:
    """Wait until the query has run its first trigger (no data yet): its source and sink
    have started, so the publisher's first events make the first micro-batch."""
    while query.lastProgress is None and query.isActive and not interrupted.is_set():
        query.awaitTermination(0.05)


def _next_steps(store: str) -> None:
    """What to try next, as commands to paste (the CLI works on the same store)."""
    beside = os.path.join(os.path.dirname(sys.executable), "jetspark")  # a venv's script, not on PATH
    if shutil.which("jetspark"):
        cli = "jetspark"
    elif os.path.exists(beside):
        rel = os.path.relpath(beside)
        cli = beside if rel.startswith("..") else rel
    else:
        cli = f"{sys.executable} -m jetspark.cli"
    where = f"--server {store}" if is_server_url(store) else f"--store {store}"
    print("\nnext")
    print(f"  {cli} {where} stream report")
    print(f"  {cli} {where} consumer info {EVENTS} {CONSUMER}")
    print(f"  {cli} {where} sub 'metrics.>' --last-per-subject --no-follow")


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m jetspark.demo",
        description="A Spark streaming pipeline on the embedded engine: shop events in EVENTS, "
        "revenue per region and micro-batch in METRICS.",
    )
    parser.add_argument(
        "--store",
        default=DEFAULT_STORE,
        metavar="DIR",
        help=f"store directory (default {DEFAULT_STORE}); EVENTS and METRICS in it are recreated",
    )
    parser.add_argument(
        "--seconds", type=_positive(float), default=20.0, metavar="N", help="how long the publisher runs (default 20)"
    )
    parser.add_argument(
        "--rate", type=_positive(int), default=2000, metavar="R", help="events published per second (default 2000)"
    )
    parser.add_argument(
        "--trigger",
        type=_positive(float),
        default=1.0,
        metavar="S",
        help="micro-batch trigger interval in seconds (default 1)",
    )
    parser.add_argument("--seed", type=int, default=7, help="random seed of the event generator (default 7)")
    parser.add_argument(
        "--replicas",
        type=_positive(int),
        default=1,
        metavar="N",
        help="replicas of EVENTS and METRICS on a NATS cluster (default 1)",
    )
    return parser.parse_args(argv)


def _positive(kind):
    def parse(raw: str):
        try:
            value = kind(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, not {raw}")
        return value

    return parse


def _reset_streams(js, replicas: int = 1) -> None:
    for name in (EVENTS, METRICS):
        try:
            old = js.stream_info(name)
        except StreamNotFoundError:
            continue
        print(f"deleting {name} from an earlier run ({old.state.messages:,} messages)")
        js.delete_stream(name)
    js.add_stream(name=EVENTS, subjects=["orders.>"], duplicate_window=120.0, num_replicas=replicas)
    js.add_stream(name=METRICS, subjects=["metrics.>"], num_replicas=replicas)


# ---------------------------------------------------------------------- the Spark query


def _start_query(spark, store: str, checkpoint: str, trigger_s: float):
    from pyspark.sql import functions as F

    events = (
        spark.readStream.format("jetstream")
        .option("store", store)
        .option("stream", EVENTS)
        .option("consumer", CONSUMER)  # durable: Spark's commits advance its ack floor
        .option("startingOffsets", "earliest")
        .load()
    )
    parsed = events.select(
        "seq",
        "timestamp",
        F.from_json(F.col("data").cast("string"), EVENT_SCHEMA).alias("e"),
    ).select("seq", "timestamp", "e.region", "e.event", "e.amount")
    # One partition per micro-batch, so mapInArrow sees the whole batch and its sums are
    # the batch's: a stateless aggregation, nothing carried from one batch to the next.
    metrics = parsed.coalesce(1).mapInArrow(_revenue_per_region, SINK_SCHEMA)
    return (
        metrics.writeStream.format("jetstream")
        .option("store", store)
        .option("stream", METRICS)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{trigger_s:g} seconds")
        .start()
    )


def _revenue_per_region(batches):
    """Runs in a Spark Python worker: one micro-batch's rows in, one message per region out."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark import TaskContext

    batches = list(batches)
    if not batches:
        return  # an empty micro-batch (Spark runs the first one even without new data)
    table = pa.Table.from_batches(batches)
    if table.num_rows == 0:
        return
    ctx = TaskContext.get()
    batch_id = int((ctx.getLocalProperty("streaming.sql.batchId") if ctx else None) or -1)
    query_id = ((ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or "adhoc")[:8]
    is_paid = pc.equal(table["event"], "paid")
    table = table.append_column("paid_amount", pc.if_else(is_paid, table["amount"], 0.0))
    for name in ("created", "paid", "shipped", "cancelled"):
        table = table.append_column(name, pc.cast(pc.equal(table["event"], name), pa.int64()))
    sums = table.group_by("region").aggregate(
        [
            ("created", "sum"), ("paid", "sum"), ("shipped", "sum"), ("cancelled", "sum"), ("paid_amount", "sum"),
            ("seq", "min"), ("seq", "max"), ("timestamp", "min"), ("timestamp", "max"),
        ]
    )  # fmt: skip
    subjects, data, ids = [], [], []
    for row in sums.to_pylist():
        region = row["region"] or "unknown"
        doc = {
            "batch": batch_id,
            "region": region,
            "created": row["created_sum"],
            "paid": row["paid_sum"],
            "shipped": row["shipped_sum"],
            "cancelled": row["cancelled_sum"],
            "revenue": round(row["paid_amount_sum"] or 0.0, 2),
            "first_seq": row["seq_min"],
            "last_seq": row["seq_max"],
            "from": row["timestamp_min"].isoformat(),
            "to": row["timestamp_max"].isoformat(),
        }
        subjects.append(f"metrics.revenue.{region}")
        data.append(json.dumps(doc))
        # The same id for the same query, batch and region: a replayed batch is a duplicate.
        ids.append(f"revenue:{query_id}:{batch_id}:{region}")
    yield pa.RecordBatch.from_pydict(
        {"subject": subjects, "data": data, "msg_id": ids},
        schema=pa.schema([("subject", pa.string()), ("data", pa.string()), ("msg_id", pa.string())]),
    )


# ---------------------------------------------------------------------- progress


@dataclass
class Monitor:
    """Prints one line per finished micro-batch from the query's recent progress."""

    js: JetStreamAPI
    last_batch: int = -1
    batches: int = 0
    rows: int = 0
    written: int = 0
    last_end: Optional[int] = None
    _widths: tuple = field(default=(5, 7, 7, 15, 9, 17, 7))

    def header(self) -> None:
        cols = ("batch", "rows", "rows/s", "offsets (seq)", "ack floor", EVENTS, METRICS)
        print("  ".join(c.rjust(w) for c, w in zip(cols, self._widths)))

    def show(self, query) -> None:
        for p in query.recentProgress:
            # Skip batches shown already, and the idle reports Spark makes while no data comes.
            if p.batchId <= self.last_batch or not p.numInputRows or not p.sources:
                continue
            self.last_batch = p.batchId
            self.batches += 1
            self.rows += p.numInputRows
            self.written += (p.sink.numOutputRows or 0) if p.sink else 0
            src = p.sources[0]
            start, end = _offset_seq(src.startOffset), _offset_seq(src.endOffset)
            self.last_end = end
            ev = self.js.stream_info(EVENTS).state
            met = self.js.stream_info(METRICS).state
            floor = _ack_floor(self.js)
            cells = (
                str(p.batchId),
                f"{p.numInputRows:,}",
                f"{p.processedRowsPerSecond or 0:,.0f}",
                f"{start or 0}..{end}",  # the first batch starts from the initial offset, seq 0
                f"{floor:,}" if floor is not None else "-",
                f"{ev.messages:,} {ev.bytes / 1e6:4.1f}MB",
                f"{met.messages:,}",
            )
            print("  ".join(c.rjust(w) for c, w in zip(cells, self._widths)), flush=True)


def _offset_seq(offset) -> Optional[int]:
    """A jetstream offset ({"stream": ..., "seq": N}, as JSON text or a dict) -> N."""
    if offset is None:
        return None
    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except ValueError:
            return None
    return int(offset["seq"]) if isinstance(offset, dict) and "seq" in offset else None


def _summary(js, publisher: "Publisher", monitor: Monitor, elapsed: float) -> None:
    ev = js.stream_info(EVENTS).state
    met = js.stream_info(METRICS, subjects_filter=">").state
    floor = _ack_floor(js)
    print("\nsummary")
    print(
        f"  events published   {publisher.published:,} ({publisher.duplicates:,} resent with the same"
        f" Nats-Msg-Id, {publisher.dropped:,} dropped by the stream as duplicates)"
    )
    print(f"  {EVENTS:<18} {ev.messages:,} messages, seq {ev.first_seq:,}..{ev.last_seq:,}, {ev.bytes / 1e6:,.1f} MB")
    print(
        f"  rows processed     {monitor.rows:,} in {monitor.batches} micro-batches"
        f" (offsets up to seq {monitor.last_end if monitor.last_end is not None else 0:,})"
    )
    if floor is None:
        print(f"  consumer           {CONSUMER}: not created (the query planned no batch)")
    else:
        print(f"  consumer           {CONSUMER}: ack floor {floor:,}")
    if floor is not None and floor < (monitor.last_end or 0):
        # The source releases a batch when Spark asks for offsets after committing it.
        print(
            "                     (the last batch was not yet released: "
            f"a new query on {CONSUMER} would start at seq {floor + 1:,})"
        )
    print(f"  {METRICS:<18} {met.messages:,} messages ({monitor.written:,} rows written by the sink)")
    totals = _revenue_totals(js)
    if totals:
        parts = ", ".join(f"{r} {v:,.2f}" for r, v in sorted(totals.items()))
        same = totals.keys() == publisher.revenue.keys() and all(
            abs(v - publisher.revenue[r]) < 0.01 * max(1, met.messages) for r, v in totals.items()
        )
        if monitor.last_end != ev.last_seq:
            check = f"up to seq {monitor.last_end or 0:,} of {ev.last_seq:,}"
        elif same:
            check = "equal to what the publisher sold"
        else:
            sold = ", ".join(f"{r} {v:,.2f}" for r, v in sorted(publisher.revenue.items()))
            check = f"but the publisher sold {sold}"
        print(f"  revenue            {parts} ({check})")
    print(f"  elapsed            {elapsed:.1f}s")


def _ack_floor(js) -> Optional[int]:
    """The demo consumer's ack floor; None until the query has created the consumer."""
    try:
        return js.consumer_info(EVENTS, CONSUMER).ack_floor.stream_seq
    except ConsumerNotFoundError:
        return None


def _revenue_totals(js) -> dict[str, float]:
    """Sum the per-batch revenue messages in METRICS back up per region."""
    totals: dict[str, float] = {}
    state = js.stream_info(METRICS).state
    if state.messages == 0:
        return totals
    for batch in js.read_batches(METRICS, state.first_seq, state.last_seq):
        for raw in batch.column("data").to_pylist():
            doc = json.loads(raw)
            totals[doc["region"]] = totals.get(doc["region"], 0.0) + doc["revenue"]
    return totals


# ---------------------------------------------------------------------- the publisher


class Publisher(threading.Thread):
    """A web shop's order events, ``rate`` per second for ``seconds``, one publish_batch per tick.

    New orders are created; created orders get paid and paid orders get
    shipped a few ticks later.  About 2% of the messages are sent again in
    the next tick with the same ``Nats-Msg-Id``, as a client that missed its
    PubAck would; EVENTS drops those copies.
    """

    def __init__(self, store: str, *, rate: int, seconds: float, seed: int) -> None:
        super().__init__(name="jetspark-demo-publisher", daemon=True)
        self.store = store
        self.rate = rate
        self.seconds = seconds
        self.rng = random.Random(seed)
        self.published = 0
        self.duplicates = 0
        self.dropped = 0
        self.revenue: dict[str, float] = {}  # paid amounts per region, each order once
        self.error: Optional[BaseException] = None
        self._stop_event = threading.Event()
        self._next_order = 1
        self._created: list[tuple[str, str, int, float, str]] = []  # order_id, region, items, amount, customer
        self._paid: list[tuple[str, str, int, float, str]] = []
        self._resend: list[tuple[str, bytes, str]] = []

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        per_tick = max(1, round(self.rate / TICKS_PER_SECOND))
        interval = 1.0 / TICKS_PER_SECOND
        try:
            with jetspark.connect(self.store) as js:
                start = time.monotonic()
                tick = 0
                while not self._stop_event.is_set() and time.monotonic() - start < self.seconds:
                    resent = len(self._resend)
                    rows = self._resend + self._tick(per_tick)
                    self._resend = [r for r in rows[resent:] if self.rng.random() < DUPLICATE_RATE]
                    table = pa.table(
                        {
                            "subject": [r[0] for r in rows],
                            "data": pa.array([r[1] for r in rows], pa.binary()),
                            "msg_id": [r[2] for r in rows],
                        }
                    )
                    ack = js.publish_batch(table, stream=EVENTS)
                    self.published += len(rows)
                    self.dropped += pc.sum(ack.duplicate).as_py() or 0
                    self.duplicates += resent
                    tick += 1
                    # Keep the pace: sleep until this tick's slot ends.
                    self._stop_event.wait(max(0.0, start + tick * interval - time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.error = exc

    def _tick(self, n: int) -> list[tuple[str, bytes, str]]:
        """n new events: about half new orders, the rest payments and shipments of earlier ones."""
        rng = self.rng
        out = []
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for _ in range(n):
            r = rng.random()
            if r < 0.3 and self._paid:
                order = self._paid.pop(rng.randrange(len(self._paid)))
                out.append(self._event(order, "shipped", now))
            elif r < 0.65 and self._created:
                order = self._created.pop(rng.randrange(len(self._created)))
                if rng.random() < 0.1:  # some orders are cancelled before payment
                    out.append(self._event(order, "cancelled", now))
                else:
                    self._paid.append(order)
                    self.revenue[order[1]] = self.revenue.get(order[1], 0.0) + order[3]
                    out.append(self._event(order, "paid", now))
            else:
                region = rng.choices(REGIONS, weights=(5, 4, 2))[0]
                items = rng.randint(1, 5)
                amount = round(sum(rng.uniform(4.0, 120.0) for _ in range(items)), 2)
                order = (f"o-{self._next_order:07d}", region, items, amount, f"c-{rng.randint(1, 5000):05d}")
                self._next_order += 1
                self._created.append(order)
                out.append(self._event(order, "created", now))
        return out

    @staticmethod
    def _event(order, event: str, now: str) -> tuple[str, bytes, str]:
        order_id, region, items, amount, customer = order
        doc = {"order_id": order_id, "event": event, "region": region, "customer": customer,
               "items": items, "amount": amount, "at": now}  # fmt: skip
        return f"orders.{region}.{event}", json.dumps(doc).encode(), f"{order_id}:{event}"


def _first_line(exc: BaseException) -> str:
    """The line that says what went wrong: for a failed query, the Python error under Spark's wrapping."""
    lines = (str(exc).strip() or repr(exc)).splitlines()
    errors = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception): ", ln)]
    return (errors[-1] if errors else lines[0])[:300]
