"""The Arrow shape of a range read, the same from both backends.

``read_batches`` yields record batches of ``schema(headers)``; a batch
append (``publish_batch``) takes the same ``headers`` column type.
"""

from __future__ import annotations

import pyarrow as pa

# A message's headers: each key with all its values, in order (NATS allows repeats).
HEADERS_TYPE = pa.map_(pa.string(), pa.list_(pa.string()))
SCHEMA = pa.schema(
    [
        pa.field("stream", pa.string(), nullable=False),
        pa.field("subject", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("data", pa.binary(), nullable=False),
    ]
)
SCHEMA_WITH_HEADERS = SCHEMA.append(pa.field("headers", HEADERS_TYPE))


def schema(headers: bool = False) -> pa.Schema:
    """The schema of ``read_batches(..., headers=headers)``."""
    return SCHEMA_WITH_HEADERS if headers else SCHEMA
