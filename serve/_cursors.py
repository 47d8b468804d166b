"""The cursors the API gives out for its next page. A search's is an opaque token for the
offset into its ranking; the video list's is the last video id of the page. A cursor that
does not read back as one this service gave out is a 400 ``invalid_cursor``."""

import base64
import binascii
import json

from serve._errors import ApiError
from serve.schema import MAX_VIDEO_ID


def _not_ours() -> ApiError:
    return ApiError(400, "invalid_cursor", "cursor is not one this service gave out")


def search_cursor(offset: int | None) -> str | None:
    """The cursor of the search page starting at ``offset``; None: no next page."""
    if offset is None:
        return None
    return base64.urlsafe_b64encode(json.dumps({"o": offset}).encode()).decode()


def search_offset(cursor: str | None) -> int:
    """The offset into the ranking that ``cursor`` (from ``search_cursor``) stands for."""
    if not cursor:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(cursor.encode()))["o"]
        if type(offset) is int and offset >= 0:  # not a bool
            return offset
    except (ValueError, KeyError, TypeError, binascii.Error):
        pass
    raise _not_ours()


def videos_after(cursor: str | None) -> int:
    """The video id that the video list's page ``cursor`` starts after (0: the first page)."""
    if not cursor:
        return 0
    if not (cursor.isascii() and cursor.isdigit()) or int(cursor) > MAX_VIDEO_ID:
        raise _not_ours()
    return int(cursor)
