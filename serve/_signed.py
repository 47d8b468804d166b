"""Signed, short-lived media URLs: ``/media/{video_id}?exp=<unix s>[&key=<key id>]&sig=<...>``.

A ``<video src>`` cannot send ``Authorization``, so the page asks (with a key) for a URL
that opens one video until ``exp``; the player then fetches byte ranges of it as it plays and
seeks. ``sig`` is HMAC-SHA256 of ``"{video_id}.{exp}"`` (asked with the bootstrap key) or
``"{video_id}.{exp}.{key id}"`` (asked with a stored key) under a secret derived from the
bootstrap API key, base64url without padding: it opens only that video, only until then, a
new bootstrap key voids every URL given out under the old one, and a URL that names a stored
key opens only while that key is live (the gate checks, serve/_auth.py). No key's secret ever
goes into a URL.
"""

import base64
import hashlib
import hmac
import time

from serve._errors import ApiError

_CONTEXT = (
    b"vifusion media url"  # what the derived secret is for: no other use of the key signs with it
)
_MAX_SIG_CHARS = 64  # a SHA-256 MAC in base64url is 43


class MediaSigner:
    def __init__(self, key: str, ttl_s: int) -> None:
        self._secret = hmac.new(key.encode(), _CONTEXT, hashlib.sha256).digest()
        self.ttl_s = ttl_s

    def _sig(self, video_id: int, exp: int, key_id: str | None) -> str:
        signed = f"{video_id}.{exp}" if key_id is None else f"{video_id}.{exp}.{key_id}"
        mac = hmac.new(self._secret, signed.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def url(
        self, video_id: int, now: float | None = None, key_id: str | None = None
    ) -> tuple[str, int]:
        """The signed path of ``video_id``'s media and its expiry (unix seconds), for the key
        ``key_id`` names (None: the bootstrap key)."""
        exp = int(now if now is not None else time.time()) + self.ttl_s
        key = "" if key_id is None else f"&key={key_id}"
        return f"/media/{video_id}?exp={exp}{key}&sig={self._sig(video_id, exp, key_id)}", exp

    def verify(
        self,
        video_id: int,
        exp: str | None,
        sig: str | None,
        now: float | None = None,
        key_id: str | None = None,
    ) -> None:
        """Raise a 403 unless ``sig`` signs ``video_id`` for ``key_id`` until ``exp`` and
        ``exp`` is still ahead. The signature is checked first (in constant time), so a URL
        someone made up learns nothing, not even whether its time has passed. Whether the key
        is still live is the caller's to check, after this."""
        if (
            not exp
            or not sig
            or not exp.isascii()
            or not exp.isdigit()
            or len(exp) > 12
            or len(sig) > _MAX_SIG_CHARS
        ):
            raise ApiError(403, "bad_signature", "this media URL is not one the service signed")
        if not hmac.compare_digest(sig.encode(), self._sig(video_id, int(exp), key_id).encode()):
            raise ApiError(403, "bad_signature", "this media URL is not one the service signed")
        if int(exp) <= (now if now is not None else time.time()):
            raise ApiError(
                403,
                "expired",
                "this media URL has expired; ask for a new one (POST "
                f"/v1/videos/{video_id}/media-url)",
            )
