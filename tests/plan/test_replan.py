"""Planning again on a lasting change of a link: the link monitor's readings of a simulated
transfer (its real class, fed through on_send / on_ack on a clock the test moves)."""

import logging

from vifusion.comm.link import LinkMonitor
from vifusion.plan.replan import LinkWatch

MESSAGE = 256 << 10
RTT_S = 0.02
MBIT = 1e6 / 8  # bytes/s


class Transfer:
    """One sender that always has data: a message in flight at a time, at the given rate."""

    def __init__(self) -> None:
        self.t = 0.0
        self.monitor = LinkMonitor(clock=lambda: self.t)
        self.watch = LinkWatch({"h1->h0": 20 * MBIT}, clock=lambda: self.t)
        self.fired: list[float] = []

    def run(self, seconds: float, mbit: float) -> None:
        end = self.t + seconds
        while self.t < end:
            token = self.monitor.on_send(MESSAGE, backlog=True)
            self.t += MESSAGE / (mbit * MBIT) + RTT_S
            self.monitor.on_ack(token)
            if self.watch.observe("h1->h0", self.monitor.stats().capacity):
                self.fired.append(self.t)


def test_a_link_that_stays_slower_for_a_minute_is_planned_again_once(caplog):
    link = Transfer()
    link.run(120, mbit=20)  # as planned (the round trip takes a little off)
    assert link.fired == []
    with caplog.at_level(logging.WARNING, logger="vifusion.plan.replan"):
        link.run(300, mbit=10)  # half the planned rate, for good
    assert len(link.fired) == 1 and link.watch.replans == 1
    # The capacity is the most carried over a minute, then the change must last a minute.
    assert 120 + 60 <= link.fired[0] <= 120 + 130
    assert 8 * MBIT < link.watch.planned["h1->h0"] < 10 * MBIT  # the new rate, planned for
    assert "planning again" in caplog.text


def test_a_dip_shorter_than_a_minute_is_not_planned_for():
    link = Transfer()
    link.run(120, mbit=20)
    link.run(40, mbit=10)
    link.run(200, mbit=20)
    assert link.fired == [] and link.watch.replans == 0


def test_a_change_within_the_tolerance_is_not_planned_for():
    link = Transfer()
    link.run(120, mbit=20)
    link.run(200, mbit=18)  # 10% below (it reads 23% with the round trip): within 30%
    assert link.fired == []
