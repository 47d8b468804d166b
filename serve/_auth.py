"""Who may call ``/v1``: the API key, then the per-key rate limit, checked before routing,
so a caller without the key learns nothing (not even that its request was malformed).

Use ``GATE`` through this module (``_auth.GATE``): Serve pickles the deployment class by
value, and a name imported into app.py would be copied, not shared with the middleware.
"""

import secrets

from fastapi.responses import JSONResponse

from serve._errors import error_response
from serve._ratelimit import RateLimiter


class Gate:
    def __init__(self) -> None:
        self._key: bytes | None = None
        self.limiter = RateLimiter(1, 1)

    def configure(self, key: str, rate: float, burst: int) -> None:
        self._key = key.encode()
        self.limiter.configure(rate, burst)

    def check(self, authorization: str) -> JSONResponse | None:
        """None if the request may go on, else the 401 or 429 to answer."""
        scheme, _, given = authorization.partition(" ")
        given = given.strip()
        if self._key is None or scheme.lower() != "bearer" or not secrets.compare_digest(given.encode(), self._key):
            return error_response(401, "unauthorized", "missing or wrong API key (Authorization: Bearer <key>)",
                                  {"WWW-Authenticate": "Bearer"})
        wait = self.limiter.take(given)
        if wait:
            return error_response(429, "rate_limited", f"too many requests; retry in {wait:.2f} s",
                                  {"Retry-After": str(max(1, int(wait + 0.999)))})
        return None


GATE = Gate()  # one per replica process
