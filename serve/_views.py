"""How the API shows the library's objects: a video, a job, a search page's moments, times
(UTC, ISO 8601 with a ``Z``)."""

import datetime
import math
from typing import Any

from serve.schema import VideoOut
from vifusion.query.ranking import snippet_fields


def utc_time(timestamp: float) -> str:
    """A Unix time as the API writes times: ``2026-01-31T12:00:00Z``."""
    return (
        datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat().replace("+00:00", "Z")
    )


# The catalog's video fields that the API gives as they are, under the same names.
_AS_STORED = "title metadata status duration_s fps width height frames_indexed error language collection".split()


def video_out(v, job=None) -> dict[str, Any]:
    """A video as the API gives it, with where its latest job ``job`` stands (None: none)."""
    return VideoOut(
        **{name: getattr(v, name) for name in _AS_STORED},
        video_id=v.id,
        created_at=utc_time(v.created_at),
        job_id=job and job.id,
        stage=job and job.stage,
        progress=round(job.progress, 4) if job else 0.0,
    ).model_dump()


def job_out(j) -> dict[str, Any]:
    """An ingest job as the API gives it."""
    return {
        "job_id": j.id,
        "video_id": j.video_id,
        "status": j.status,
        "progress": round(j.progress, 4),
        "frames_indexed": j.frames_indexed,
        "error": j.error,
        "stage": j.stage,
        "warnings": list(j.warnings),
    }


def moments(service, page) -> list[dict[str, Any]]:
    """A search page's results as the API returns them (titles from the catalog)."""
    videos = service.catalog.get_videos([m.video_id for m in page.results])
    return [
        {
            "video_id": m.video_id,
            "title": videos[m.video_id].title if m.video_id in videos else None,
            "start_s": round(m.start_s, 3),
            "end_s": round(m.end_s, 3),
            "score": round(m.score, 4),
            "thumbnail_url": f"/v1/videos/{m.video_id}/thumbnail?t={_thumbnail_t(m, videos.get(m.video_id)):.2f}",
            "matched": m.matched,
            **snippet_fields(m.snippet, m.snippet_english),
            "language": m.language,
        }
        for m in page.results
    ]


def _thumbnail_t(moment, video) -> float:
    """The middle of a moment, inside its video (a clip's moment may run past the end, and
    a thumbnail past the end is a 404), rounded down to the hundredth the URL gives."""
    t = (moment.start_s + moment.end_s) / 2
    if video is not None and video.duration_s:
        t = min(t, video.duration_s)
    return math.floor(t * 100) / 100
