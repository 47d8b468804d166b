"""Sending the outbox's events to their hooks: ``Deliverer``, one thread in the data dir's
ingest pool (vifusion/ingest/pool.py: one actor per data dir, however many API replicas).

Each round it takes the due deliveries under a lease (``Catalog.claim_deliveries``: a second
deliverer on the same catalog, a pool's next incarnation say, passes over them) and POSTs
each event's JSON to its hook with ``X-ViFusion-Event``, ``X-ViFusion-Delivery`` (the event's
id), ``X-ViFusion-Timestamp`` (Unix seconds) and ``X-ViFusion-Signature`` (``_sign.py``).

- A 2xx is delivered. Anything else (another status, a redirect, no answer within
  ``hook_timeout_s``, an address refused) is tried again after ``backoff``: doubling from
  ``hook_retry_base_s`` up to ``hook_retry_max_s``, each wait drawn between half and all of
  that (jitter, so hooks that failed together do not come back together), until
  ``hook_retry_window_s`` after the event (a day), then the delivery is failed.
- Redirects are not followed: a hook's URL is where its events go, and a redirect could
  point inside the network that the URL check kept it out of. Each attempt checks the URL's
  address again and connects to the address it checked.
- At least once: a delivery is recorded after its POST, so a deliverer that dies between the
  two sends it again once its lease runs out. A receiver dedups by ``X-ViFusion-Delivery``.
  State is in the catalog: a restart sends what was pending and nothing delivered.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from vifusion.catalog import Catalog, Delivery
from vifusion.config import Config
from vifusion.hooks._sign import signature
from vifusion.ingest.sources import SourceError, check_url

log = logging.getLogger(__name__)

_BATCH = 32  # deliveries taken a round at most
_SENDERS = 4  # deliveries in flight at once: one slow receiver does not hold up the rest
_PRUNE_EVERY_S = 3600.0
_KEEP_ENDED_S = 7 * 86400.0  # delivered and failed deliveries listed this long


def backoff(attempts: int, cfg: Config, rng: random.Random | None = None) -> float:
    """Seconds to wait after the ``attempts``-th failed attempt (1 for the first)."""
    ceiling = min(cfg.hook_retry_max_s, cfg.hook_retry_base_s * 2 ** min(attempts - 1, 40))
    return ceiling * (rng or random).uniform(0.5, 1.0)


def _post(d: Delivery, cfg: Config) -> tuple[int | None, str | None]:
    """One attempt: (HTTP status, None) where it answered, else (None, why)."""
    import httpx

    try:
        addr = check_url(d.url, cfg.allow_private_urls)
    except SourceError as e:
        return None, f"{e.code}: {e}"
    parts = urlsplit(d.url)
    host = f"[{addr}]" if ":" in addr else addr
    pinned = parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host).geturl()
    body = d.body.encode()
    now = int(time.time())
    headers = {
        "Host": parts.netloc,
        "Content-Type": "application/json",
        "User-Agent": "ViFusion-Webhooks/1",
        "X-ViFusion-Event": d.event_type,
        "X-ViFusion-Delivery": d.event_id,
        "X-ViFusion-Timestamp": str(now),
        "X-ViFusion-Signature": signature(d.secret, now, body),
    }
    try:
        with httpx.Client(timeout=cfg.hook_timeout_s, follow_redirects=False) as client:
            r = client.post(
                pinned,
                content=body,
                headers=headers,
                extensions={"sni_hostname": parts.hostname},
            )
    except httpx.HTTPError as e:  # refused, reset, timed out, a TLS failure
        return None, f"{type(e).__name__}: {e}"
    return r.status_code, None if 200 <= r.status_code < 300 else f"HTTP {r.status_code}"


class Deliverer:
    """Delivers the outbox of ``catalog``; ``start`` runs it in a thread every
    ``hook_poll_s``, ``run_once`` is one round (what the thread does; tests call it)."""

    def __init__(self, cfg: Config, catalog: Catalog) -> None:
        self.cfg = cfg
        self.catalog = catalog
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._senders = ThreadPoolExecutor(_SENDERS, thread_name_prefix="vifusion-hooks")
        self._pruned = 0.0
        # Held past the round's longest: a batch sent _SENDERS at a time, each to its timeout.
        self._lease_s = (_BATCH // _SENDERS + 1) * cfg.hook_timeout_s + 30

    def run_once(self) -> int:
        """Send every delivery due now (at most a batch); how many were taken."""
        taken = self.catalog.claim_deliveries(self._lease_s, _BATCH)
        list(self._senders.map(self._send, taken))
        if time.monotonic() - self._pruned > _PRUNE_EVERY_S:
            self._pruned = time.monotonic()
            self.catalog.prune_outbox(_KEEP_ENDED_S)
        return len(taken)

    def _send(self, d: Delivery) -> None:
        status, error = _post(d, self.cfg)
        if error is None:
            self.catalog.record_attempt(d, "delivered", status, None)
            return
        next_at = time.time() + backoff(d.attempts + 1, self.cfg)
        given_up = next_at > d.event_at + self.cfg.hook_retry_window_s
        if given_up:
            log.warning(
                "webhook %s: event %s failed for good after %d attempts: %s",
                d.hook_id,
                d.event_id,
                d.attempts + 1,
                error,
            )
        self.catalog.record_attempt(
            d, "failed" if given_up else "pending", status, error, next_at=next_at
        )

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="vifusion-hooks", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.cfg.hook_poll_s):
            try:
                while self.run_once() == _BATCH and not self._stop.is_set():
                    pass  # more are due: no wait
            except Exception:  # the catalog's server away a moment: the next round tries again
                log.exception("webhook deliveries: a round failed")

    def close(self) -> None:
        """Stop: the round under way gets one attempt's time to end; what it did not record
        is sent again once its lease runs out (at least once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.cfg.hook_timeout_s + 1)
        self._senders.shutdown(wait=False, cancel_futures=True)
