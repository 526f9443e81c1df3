"""publish_batch's table checked: column types, subjects without nulls, per-row headers and
message ids (``jetspark.validate``'s rules: refusals name the argument, nothing is written)."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from jetspark.err_codes import BAD_REQUEST
from jetspark.errors import BadRequestError
from jetspark.protocol import subjects as subj
from jetspark.validate.args import INT64_MAX, header_name, header_value, integer, publish_subject_ok, show, text

_BATCH_COLUMNS = (
    "columns 'subject' (string) and 'data' (binary or string), "
    "optional 'headers' (map<string, string> or map<string, list<string>>) and 'msg_id' (string)"
)


def _is_text_type(t) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t)


def batch_table(data: Any, msg_id_prefix: Any = None, msg_id_start: Any = 0):
    """publish_batch's table: a pyarrow Table or RecordBatch with the expected column
    types, its subjects without nulls; returned as a Table whose ``subject`` is string
    and ``data`` binary.  Checks ``msg_id_prefix``/``msg_id_start`` too."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if not isinstance(data, pa.Table):
        raise TypeError(f"data must be a pyarrow Table or RecordBatch with {_BATCH_COLUMNS}, not {show(data)}")
    names = data.column_names
    for required in ("subject", "data"):
        if required not in names:
            raise BadRequestError(
                400, BAD_REQUEST, f"data (the table) has no {required!r} column: publish_batch takes {_BATCH_COLUMNS}"
            )
    if len(set(names)) != len(names):
        raise BadRequestError(400, BAD_REQUEST, f"data (the table) has repeated column names {names}")
    if msg_id_prefix is not None:
        header_value(text(msg_id_prefix, "msg_id_prefix"), "msg_id_prefix")
        if "msg_id" in names:
            raise BadRequestError(
                400, BAD_REQUEST, "publish_batch takes either a msg_id column or msg_id_prefix, not both"
            )
    integer(msg_id_start, "msg_id_start", 0, INT64_MAX)

    subject = data.column("subject")
    if pa.types.is_dictionary(subject.type) and _is_text_type(subject.type.value_type):
        subject = subject.cast(subject.type.value_type)
    if not _is_text_type(subject.type):
        raise TypeError(f"data column 'subject' must be of type string, not {subject.type}")
    if subject.null_count:
        row = _first_null(subject)
        raise BadRequestError(400, BAD_REQUEST, f"row {row} of the batch has a null subject; every row needs one")
    if not pa.types.is_string(subject.type):
        subject = subject.cast(pa.string())
    payloads = data.column("data")
    t = payloads.type
    if not (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or _is_text_type(t)
        or pa.types.is_null(t)
    ):
        raise TypeError(f"data column 'data' must be of type binary (or string), not {t}")
    if not pa.types.is_binary(t):
        payloads = pc.cast(payloads, pa.binary())
    if "headers" in names:
        _check_headers_type(data.column("headers").type)
    if "msg_id" in names:
        t = data.column("msg_id").type
        if not (_is_text_type(t) or pa.types.is_null(t)):
            raise TypeError(f"data column 'msg_id' must be of type string, not {t}")
    data = data.set_column(names.index("subject"), "subject", subject)
    return data.set_column(names.index("data"), "data", payloads)


def _first_null(col) -> int:
    import numpy as np
    import pyarrow.compute as pc

    return int(np.flatnonzero(~pc.is_valid(col).to_numpy(zero_copy_only=False))[0])


def _check_headers_type(t) -> None:
    import pyarrow as pa

    ok = pa.types.is_null(t)
    if pa.types.is_map(t) and _is_text_type(t.key_type):
        v = t.item_type
        ok = _is_text_type(v) or ((pa.types.is_list(v) or pa.types.is_large_list(v)) and _is_text_type(v.value_type))
    if not ok:
        raise TypeError(
            f"data column 'headers' must be of type map<string, string> or map<string, list<string>>, not {t}"
        )


def batch_subjects(subjects, patterns: list[str], stream: str):
    """Every row's subject is one ``publish`` accepts and the stream captures (``patterns``):
    returns (unique subjects, each row's index into them); a bad row refuses the batch,
    named by its index and subject."""
    import numpy as np
    import pyarrow as pa

    col = subjects.combine_chunks() if isinstance(subjects, pa.ChunkedArray) else subjects
    encoded = col.dictionary_encode()
    uniq = encoded.dictionary.to_pylist()
    idx = encoded.indices.to_numpy(zero_copy_only=False)
    for k, u in enumerate(uniq):
        if not (publish_subject_ok(u) and subj.is_valid(u)):
            why = "is not a valid subject to publish to (non-empty tokens, no whitespace)"
        elif not subj.matches_any(patterns, u):
            why = f"is not captured by stream {stream!r} (subjects {patterns})"
        else:
            continue
        row = int(np.flatnonzero(idx == k)[0])
        raise BadRequestError(
            400, BAD_REQUEST, f"row {row} of the batch: subject {show(u)} {why}; nothing from the batch was stored"
        )
    return uniq, idx


def row_headers(cell: Any, row: int) -> dict:
    """One row's ``headers`` cell (a map as (name, value) pairs, or a dict; values str or lists
    of str, nulls skipped) as a dict for the header encoder, checked as ``publish`` checks it."""
    if not cell:
        return {}
    items = cell.items() if isinstance(cell, Mapping) else cell
    out: dict = {}
    where = f"row {row} of the batch: headers"
    for k, v in items:
        if v is None:
            continue
        header_name(k, where)
        vals = [x for x in v if x is not None] if isinstance(v, (list, tuple)) else [v]
        for x in vals:
            header_value(x, f"{where}[{k!r}]")
        if not vals:
            continue  # a name with no values writes no header line
        if k in out:
            prev = out[k]
            out[k] = (prev if isinstance(prev, list) else [prev]) + vals
        else:
            out[k] = vals if len(vals) > 1 else vals[0]
    return out


def row_msg_id(value: Any, row: int) -> Optional[str]:
    """One row's ``msg_id`` (null: none) without the blanks at its ends, the id the header
    codec sends (as nats-py strips a header value) and so the one a server deduplicates on;
    an empty, blank-only or multi-line id is refused."""
    if value is None:
        return None
    if value == "":
        raise BadRequestError(400, BAD_REQUEST, f"row {row} of the batch has an empty msg_id")
    msg_id = header_value(value, f"row {row} of the batch: msg_id").strip()
    if not msg_id:
        raise BadRequestError(400, BAD_REQUEST, f"row {row} of the batch has a msg_id of blanks only: {value!r}")
    return msg_id
