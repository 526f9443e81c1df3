"""A short tour of the embedded engine: ``python -m jetspark.demo [--path [DIR]]``.

It creates a stream ORDERS on ``orders.>``, publishes a few messages (one
of them twice with the same ``Nats-Msg-Id``, to show deduplication), prints
the PubAcks and the stream state, reads a message back, purges one subject
and prints the state again.

Without ``--path`` the store lives in a fresh temporary directory that is
removed at the end; ``--path`` alone keeps it in ``./jetspark-data``, and
``--path DIR`` in DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from typing import Iterator, Optional, Sequence

import jetspark
from jetspark import StreamInfo, StreamNotFoundError

STREAM = "ORDERS"
DEFAULT_PATH = "./jetspark-data"

# (subject, payload, headers); the last entry is published twice.
MESSAGES = [
    ("orders.new", {"id": 1001, "item": "widget", "qty": 2}, None),
    ("orders.new", {"id": 1002, "item": "gadget", "qty": 1}, None),
    ("orders.eu.new", {"id": 1003, "item": "widget", "qty": 5}, None),
    ("orders.shipped", {"id": 1001}, None),
    ("orders.cancelled", {"id": 1002}, None),
    ("orders.new", {"id": 1004, "item": "sprocket", "qty": 3}, {"Nats-Msg-Id": "order-1004"}),
]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jetspark.demo", description="A short tour of the embedded engine.")
    parser.add_argument(
        "--path",
        nargs="?",
        const=DEFAULT_PATH,
        metavar="DIR",
        help=f"keep the store in DIR (default with --path alone: {DEFAULT_PATH}); "
        "without --path a temporary directory is used and removed",
    )
    args = parser.parse_args(argv)

    with _store_dir(args.path) as path:
        print(f"jetspark {jetspark.__version__}: embedded engine on {path}")
        with jetspark.connect(path) as js:
            _run(js)
    return 0


@contextlib.contextmanager
def _store_dir(path: Optional[str]) -> Iterator[str]:
    if path is not None:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="jetspark-demo-") as tmp:
        yield tmp


def _run(js) -> None:
    # A kept store may still hold ORDERS from an earlier run; start clean so
    # the sequences and the dedup below read the same every time.
    try:
        old = js.stream_info(STREAM)
    except StreamNotFoundError:
        pass
    else:
        print(f"\n{STREAM} exists from an earlier run ({old.state.messages} messages): deleting it")
        js.delete_stream(STREAM)

    info = js.add_stream(name=STREAM, subjects=["orders.>"])
    cfg = info.config
    print(
        f"\nadded stream {cfg.name} on {', '.join(cfg.subjects or [])}"
        f" (storage={_plain(cfg.storage)}, retention={_plain(cfg.retention)},"
        f" duplicate_window={cfg.duplicate_window}s)"
    )

    print("\npublish")
    for subject, body, headers in MESSAGES:
        _publish(js, subject, body, headers)
    # Same Nats-Msg-Id inside the duplicate window: not stored again, and the
    # PubAck repeats the original sequence with duplicate=True.
    subject, body, headers = MESSAGES[-1]
    _publish(js, subject, body, headers)

    print()
    _print_state(js.stream_info(STREAM, subjects_filter=">"))

    msg = js.get_msg(STREAM, seq=3)
    body = (msg.data or b"").decode(errors="replace")
    when = msg.time.isoformat(timespec="milliseconds") if msg.time else "-"
    print(f"\nget_msg seq=3: {msg.subject} {body} at {when}")
    dup_seq = js.get_msg(STREAM, seq=len(MESSAGES))
    print(f"get_msg seq={dup_seq.seq}: {dup_seq.subject} headers={dup_seq.headers}")

    print("\npurge_stream subject=orders.new")
    js.purge_stream(STREAM, subject="orders.new")
    _print_state(js.stream_info(STREAM, subjects_filter=">"))


def _publish(js, subject: str, body: dict, headers: Optional[dict]) -> None:
    ack = js.publish(subject, json.dumps(body).encode(), headers=headers)
    note = f"  [Nats-Msg-Id {headers['Nats-Msg-Id']}]" if headers else ""
    dup = "  duplicate" if ack.duplicate else ""
    print(f"  {subject:<18} -> {ack.stream} seq={ack.seq}{dup}{note}")


def _print_state(info: StreamInfo) -> None:
    s = info.state
    print(
        f"state of {info.config.name}: messages={s.messages} bytes={s.bytes}"
        f" first_seq={s.first_seq} last_seq={s.last_seq} num_subjects={s.num_subjects}"
    )
    for subject, count in sorted((s.subjects or {}).items()):
        print(f"  {subject:<18} {count}")


def _plain(value) -> str:
    """An enum's wire value, anything else as is."""
    return str(getattr(value, "value", value))


if __name__ == "__main__":
    raise SystemExit(main())
