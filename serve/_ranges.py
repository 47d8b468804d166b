"""A video file as a response, byte ranges and all (a ``<video>`` seeks with them), from the
descriptor the service opened and checked, with Range errors written as the API's errors."""

import os
from pathlib import Path

from fastapi.responses import FileResponse, Response
from starlette.responses import MalformedRangeHeader, RangeNotSatisfiable

from serve import _errors
from vifusion._files import fd_path

_VIDEO_TYPES = {
    ".webm": "video/webm",
    ".mkv": "video/x-matroska",
    ".mov": "video/quicktime",
    ".avi": "video/x-msvideo",
    ".ogv": "video/ogg",
    ".gif": "image/gif",
}


def video_response(fd: int, path: Path) -> FileResponse:
    """The video open at ``fd`` (named ``path``: its suffix gives the media type, MP4 by
    default); the response closes ``fd``."""
    return _DescriptorResponse(fd, _VIDEO_TYPES.get(path.suffix.lower(), "video/mp4"))


class _DescriptorResponse(FileResponse):
    """A FileResponse (byte ranges and all) of an open descriptor, not of a name: Starlette
    opens ``fd_path`` of it, the file that was checked whatever its name points at now. The
    descriptor is closed when the response ends, sent whole or not."""

    def __init__(self, fd: int, media_type: str) -> None:
        super().__init__(fd_path(fd), media_type=media_type, stat_result=os.fstat(fd))
        self._fd = fd

    async def __call__(self, scope, receive, send) -> None:
        try:
            refused = self._refused_range(scope)
            await (refused or super().__call__)(scope, receive, send)
        finally:
            os.close(self._fd)

    def _refused_range(self, scope) -> Response | None:
        """The error, as this API writes errors, for a Range header Starlette would refuse
        (it answers those in plain text): 400 malformed, 416 past the end. Parsed by
        Starlette's own reader, so what passes here is what it serves."""
        headers = dict(scope["headers"])
        http_range = headers.get(b"range")
        if_range = headers.get(b"if-range")
        if http_range is None or (
            if_range is not None and not self._should_use_range(if_range.decode("latin-1"))
        ):
            return None  # the whole file (an If-Range that does not match asks for that)
        size = self.stat_result.st_size
        try:
            self._parse_range_header(http_range.decode("latin-1"), size)
        except MalformedRangeHeader as e:
            return _errors.error_response(
                400, "bad_range", f"Range header not understood: {e.content}"
            )
        except RangeNotSatisfiable:
            return _errors.error_response(
                416,
                "range_not_satisfiable",
                f"the video has {size} bytes",
                {"Content-Range": f"bytes */{size}"},
            )
        return None
