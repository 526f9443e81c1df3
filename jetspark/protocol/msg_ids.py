"""Nats-Msg-Id header blocks for a whole batch of generated ids at once (both backends'
``publish_batch(msg_id_prefix=...)``).  Kept apart from the header codec so that importing
``protocol.headers`` (the CLI does) does not load NumPy."""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from jetspark.protocol import headers as H


def blocks(
    prefix: str, numbers: np.ndarray, on_run: Optional[Callable[[bytes, bytes, np.ndarray], None]] = None
) -> tuple[bytes, np.ndarray]:
    """The header blocks ``NATS/1.0\\r\\nNats-Msg-Id: <prefix><n>\\r\\n\\r\\n`` for ascending
    ``numbers``, back to back, and their offsets (len(numbers) + 1): built as rows of bytes,
    one NumPy array per digit count, rather than one string per message.  ``on_run(head,
    tail, digits)`` sees each run of one digit count (digits: rows x d digit values), e.g.
    to checksum the blocks the same way."""
    head = (H._PREFIX.decode() + H.MSG_ID + ": " + prefix).encode()
    tail = b"\r\n\r\n"
    numbers = np.asarray(numbers, dtype=np.int64)
    digits = np.ones(len(numbers), dtype=np.int64)
    for power in range(1, 19):
        digits += numbers >= 10**power
    parts, widths = [], []
    for d in np.unique(digits).tolist():  # ascending numbers: each digit count is one run
        n = numbers[digits == d]
        width = len(head) + d + len(tail)
        values = np.empty((len(n), d), dtype=np.int64)
        for j in range(d):
            values[:, j] = (n // 10 ** (d - 1 - j)) % 10
        rows = np.empty((len(n), width), dtype=np.uint8)
        rows[:, : len(head)] = np.frombuffer(head, dtype=np.uint8)
        rows[:, len(head) : len(head) + d] = 48 + values
        rows[:, len(head) + d :] = np.frombuffer(tail, dtype=np.uint8)
        parts.append(rows.ravel())
        widths.append(np.full(len(n), width, dtype=np.int64))
        if on_run is not None:
            on_run(head, tail, values)
    offsets = np.zeros(len(numbers) + 1, dtype=np.int64)
    if len(numbers):
        np.cumsum(np.concatenate(widths), out=offsets[1:])
    return (np.concatenate(parts).tobytes() if parts else b""), offsets
