"""What a key limited to collections (vifusion/catalog/_keys.py) may reach, checked by the
routes: it searches and lists only its collections (asking for another is a 403 naming it),
adds videos only to them (403), and a video or job of another collection is a 404 wherever a
route names it (``in_reach``), as if it did not exist: a key learns nothing of the videos it
cannot reach. A key not limited (the bootstrap key among them) reaches every collection."""

from collections.abc import Sequence

from fastapi import Request

from serve import _auth
from serve._errors import ApiError
from serve._replica import Serving
from vifusion.service import NotFound


def _limited(request: Request) -> tuple[str, ...] | None:
    who = request.scope.get(_auth.CALLER)
    return None if who is None else who.collections


def _refused(limited: Sequence[str], name: str, what: str) -> ApiError:
    return ApiError(
        403,
        "forbidden_collection",
        f"this key may not {what} collection {name!r}; it is limited to {', '.join(limited)}",
    )


def searched(
    request: Request, asked: Sequence[str] | None, what: str = "search"
) -> list[str] | None:
    """The collections a search or a listing looks in (``what`` it does, for the 403): those
    ``asked`` (None: every one the key reaches, and None again for a key that reaches all)."""
    limited = _limited(request)
    if limited is None:
        return None if asked is None else list(asked)
    if asked is None:
        return list(limited)
    for name in asked:
        if name not in limited:
            raise _refused(limited, name, what)
    return list(asked)


def ingested(request: Request, name: str) -> str:
    """``name``, if the key may add videos to it (else 403)."""
    limited = _limited(request)
    if limited is not None and name not in limited:
        raise _refused(limited, name, "add videos to")
    return name


def reaches(request: Request, collection: str) -> bool:
    """Whether the request's key reaches ``collection``."""
    limited = _limited(request)
    return limited is None or collection in limited


def reaches_all(request: Request, what: str) -> None:
    """A 403 unless the request's key reaches every collection: the keys of all collections
    are listed and revoked only by such a key."""
    limited = _limited(request)
    if limited is not None:
        raise ApiError(
            403,
            "forbidden_collection",
            f"only a key not limited to collections may {what}; this one is limited to "
            f"{', '.join(limited)}",
        )


def in_reach(request: Request, replica: Serving) -> None:
    """Every route's second dependency (after the scope check): a ``video_id`` or ``job_id``
    in the path that is in a collection the key does not reach is a 404, the same as for one
    that does not exist. A key that reaches every collection costs nothing here."""
    limited = _limited(request)
    if limited is None:
        return
    params = request.path_params
    catalog = replica.service.catalog
    video_id: int | None = None
    if "job_id" in params:
        job = catalog.get_job(str(params["job_id"]))
        if job is None:
            return  # the route says it is not there
        video_id = job.video_id
    elif "video_id" in params:
        try:
            video_id = int(params["video_id"])
        except ValueError:
            return  # the route's own validation answers
    if video_id is None:
        return
    video = catalog.get_video(video_id)
    if video is not None and video.collection not in limited:
        raise NotFound(
            f"no job {params['job_id']}" if "job_id" in params else f"no video {video_id}"
        )
