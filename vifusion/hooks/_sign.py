"""What a delivery's signature is: HMAC-SHA256 under the hook's secret of
``f"{timestamp}.{body}"``, in hex, sent as ``X-ViFusion-Signature: sha256=<hex>``. The
timestamp is signed with the body, so a receiver that refuses old timestamps (say, over five
minutes) also refuses a captured delivery sent again later."""

from __future__ import annotations

import hashlib
import hmac


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-ViFusion-Signature`` value of ``body`` sent at ``timestamp`` (Unix seconds)."""
    signed = f"{timestamp}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def verify(secret: str, timestamp: str, body: bytes, sent: str) -> bool:
    """Whether ``sent`` is the signature of ``body`` at ``timestamp`` (as the headers carry
    them), compared in constant time: what a receiver checks (README, Webhooks)."""
    try:
        expected = signature(secret, int(timestamp), body)
    except ValueError:
        return False
    return hmac.compare_digest(expected, sent)
