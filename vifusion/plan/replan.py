"""When to plan again: a link whose capacity has stayed off the plan's rate for a while.

A plan is made for each link's rate (``model.NodeType.uplink``). The link monitor measures
what a link carries (``LinkStats.capacity``: the most it carried over its last minute, so a
busy link reads its rate and an idle one keeps its last). Once a link's capacity has been
off its planned rate by more than ``tolerance`` in every reading for ``lasting_s``,
``observe`` says so, once: the watch then takes the measured rate as the planned one, so only
a further change fires again. A short dip or burst never fires; a reading with no capacity
measured yet (0) neither starts nor breaks a run.

The ingest pool feeds it its node aggregators' readings and plans again when it fires
(``follow.py``); ``/metrics`` counts those re-plans (``vifusion_replans_total``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class LinkWatch:
    """Readings of named links against the rates (bytes/s) a plan was made for."""

    def __init__(
        self,
        planned: dict[str, float],
        tolerance: float = 0.3,
        lasting_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.planned = dict(planned)
        self.tolerance, self.lasting_s, self._clock = tolerance, lasting_s, clock
        self.replans = 0
        self._off_since: dict[str, float] = {}

    def observe(self, link: str, capacity: float) -> bool:
        """One reading of ``link``'s capacity (``LinkStats.capacity``, bytes/s); True when it
        says to plan again (see the module doc)."""
        planned = self.planned.get(link)
        if planned is None or capacity <= 0:
            return False
        now = self._clock()
        if abs(capacity - planned) <= self.tolerance * planned:
            self._off_since.pop(link, None)
            return False
        since = self._off_since.setdefault(link, now)
        if now - since < self.lasting_s:
            return False
        log.warning(
            "link %s has carried %.3g Mbit/s for %.0f s, planned for %.3g: planning again",
            link,
            capacity * 8 / 1e6,
            now - since,
            planned * 8 / 1e6,
        )
        self.planned[link] = capacity
        del self._off_since[link]
        self.replans += 1
        return True
