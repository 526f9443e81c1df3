"""A stream's state as ``stream_info`` reports it: counts, sequences, times, subjects, deleted ones.

A function of the stream (stream.py, which calls it under the stream's lock); this module
imports no stream.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from jetspark.api import ENGINE_NAME, ClusterInfo, StreamInfo, StreamState, ns_to_datetime
from jetspark.protocol import subjects as subj


def stream_info(st: Any, subjects_filter: Optional[str], deleted_details: bool) -> StreamInfo:
    """The StreamInfo of ``st`` (a stream.Stream, its lock held)."""
    s = st.storage
    consumer_count = st.consumers.count  # damaged consumers still exist
    h = s.header
    first = h.first_seq
    if not h.held and h.last_seq == 0 and not st.config.first_seq:
        first = 0  # a stream that never held a message reports 0/0
    first_ts = None
    if h.msgs:
        first_ts = ns_to_datetime(int(s.entries(h.first_seq, h.first_seq)[0]["ts"]))
    num_deleted = (h.last_seq - first + 1) - h.msgs if h.last_seq > first else 0
    deleted = None
    if deleted_details and h.last_seq >= first and first:
        deleted = (np.flatnonzero(s.dead_mask(first, h.last_seq)) + first).tolist() or None
    subjects = None
    if subjects_filter:
        count = s.ensure_stats()[0]
        subjects = {
            name: int(count[i])
            for i, name in enumerate(s.subjects)
            if count[i] > 0 and subj.matches(subjects_filter, name)
        } or None
    state = StreamState(
        messages=h.msgs,
        bytes=h.bytes,
        first_seq=first,
        last_seq=h.last_seq,
        consumer_count=consumer_count,
        first_ts=first_ts,
        last_ts=ns_to_datetime(h.last_ts) if h.last_ts else None,
        num_subjects=h.num_subjects,
        num_deleted=max(num_deleted, 0),
        deleted=deleted,
        subjects=subjects,
        lost=s.lost(),
    )
    return StreamInfo(
        config=st.config,
        state=state,
        created=ns_to_datetime(st.created_ns),
        cluster=ClusterInfo(leader=ENGINE_NAME),
    )
