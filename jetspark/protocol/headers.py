"""NATS message header blocks: ``NATS/1.0\\r\\nKey: value\\r\\n...\\r\\n``.

The stored and counted form is the whole block exactly as a NATS client
(nats-py) encodes it, so byte accounting equals the server's.
"""

from __future__ import annotations

from typing import Mapping, Optional

_PREFIX = b"NATS/1.0\r\n"

MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJ_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"


def encode(headers: Optional[Mapping[str, object]]) -> bytes:
    """Encode a header mapping as nats-py does (values may be lists for repeated keys)."""
    if not headers:
        return b""
    parts = [_PREFIX]
    for key, value in headers.items():
        values = value if isinstance(value, (list, tuple)) else (value,)
        for v in values:
            parts.append(f"{key.strip()}: {str(v).strip()}\r\n".encode())
    parts.append(b"\r\n")
    return b"".join(parts)


def decode_multi(block: bytes) -> dict[str, list[str]]:
    """Decode a header block into key -> every value, in order."""
    out: dict[str, list[str]] = {}
    if not block:
        return out
    lines = block.decode("utf-8", "replace").split("\r\n")
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def decode(block: bytes) -> Optional[dict[str, str]]:
    """Decode a header block into key -> value (the last one for repeated keys), or None."""
    multi = decode_multi(block)
    return {k: v[-1] for k, v in multi.items()} or None


def lookup(block: bytes, key: str) -> Optional[str]:
    """One header's value without decoding the block into a dict (the publish hot path)."""
    if not block:
        return None
    needle = ("\r\n" + key + ":").encode()
    i = block.find(needle)
    if i < 0:
        return None
    start = i + len(needle)
    end = block.find(b"\r\n", start)
    return block[start:end].decode("utf-8", "replace").strip()
