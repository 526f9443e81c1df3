"""JetStream API calls that the handle (``client``) and the bulk paths share, on a ``Session``."""

from __future__ import annotations

from typing import Optional

from jetspark.api import ConsumerInfo, StreamInfo
from jetspark.remote import wire
from jetspark.remote.session import Session

_PAGE_GUARD = 10_000


async def stream_info(
    s: Session, name: str, subjects_filter: Optional[str] = None, deleted_details: bool = False
) -> StreamInfo:
    subject = s.stream_subject("INFO", name)
    req: dict = {}
    if subjects_filter:
        req["subjects_filter"] = subjects_filter
    if deleted_details:
        req["deleted_details"] = True
    resp = await s.api(subject, req or None, what=f"stream_info {name!r}")
    subjects = (resp.get("state") or {}).get("subjects")
    total = int(resp.get("total", 0) or 0)
    if subjects_filter and subjects is not None and total > len(subjects):
        # The server pages per-subject counts.
        subjects = dict(subjects)
        for _ in range(_PAGE_GUARD):
            more = await s.api(subject, dict(req, offset=len(subjects)), what=f"stream_info {name!r}")
            page = (more.get("state") or {}).get("subjects") or {}
            if not page:
                break
            subjects.update(page)
            if len(subjects) >= total:
                break
        resp["state"]["subjects"] = subjects
    return wire.stream_info_from_wire(resp)


async def consumer_info(s: Session, stream: str, consumer: str) -> ConsumerInfo:
    return wire.consumer_info_from_wire(
        await s.api(s.consumer_subject("INFO", stream, consumer), what=f"consumer_info {consumer!r}")
    )


async def streams_with_subject(s: Session, subject: str) -> list[str]:
    """The names of the streams whose subjects overlap ``subject``."""
    resp = await s.api(
        f"{s.api_prefix}.STREAM.NAMES", {"subject": subject}, what=f"find_stream_name_by_subject {subject!r}"
    )
    return resp.get("streams") or []
