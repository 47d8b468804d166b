import heapq
import random

import pytest

from tests._helpers import Clock, refusal
from vifusion.comm import LinkMonitor


def run(
    mon: LinkMonitor,
    clock: Clock,
    *,
    rate: float,
    rtt: float,
    nbytes: int,
    n: int,
    service: float = 0.0,
):
    """n back-to-back messages over a link of ``rate`` bytes/s and base round trip ``rtt``,
    one in flight at a time."""
    for _ in range(n):
        token = mon.on_send(nbytes, backlog=True)
        clock.t += rtt + nbytes / rate + service
        mon.on_ack(token, service_s=service)


def test_rate_and_min_rtt_come_from_the_transfers():
    clock = Clock(100.0)
    mon = LinkMonitor(clock=clock)
    run(mon, clock, rate=12.5e6, rtt=0.010, nbytes=125_000, n=20, service=0.003)
    s = mon.stats()
    # one message in flight: each carries 125 kB in 10 ms + 10 ms (+ 3 ms at the shard)
    assert s.delivery_rate == pytest.approx(125_000 / 0.023, rel=1e-6)
    # the shard's service time is not network: min RTT = base + own serialisation
    assert s.min_rtt == pytest.approx(0.020, rel=1e-6)
    assert s.acked_messages == 20 and s.acked_bytes == 20 * 125_000 and s.in_flight == 0
    assert s.queueing_delay == pytest.approx(0.0, abs=1e-3)


def test_queueing_delay_grows_when_the_link_carries_less():
    clock = Clock(100.0)
    mon = LinkMonitor(clock=clock)
    run(mon, clock, rate=12.5e6, rtt=0.010, nbytes=125_000, n=20)
    run(mon, clock, rate=1.25e6, rtt=0.010, nbytes=125_000, n=5)  # squeezed to a tenth
    s = mon.stats()
    assert s.queueing_delay > 0.05
    # the path rate follows the squeeze, the capacity remembers what the link carried
    assert s.path_rate == pytest.approx(1.25e6, rel=0.15)
    assert s.capacity > 5e6


def test_app_limited_samples_do_not_lower_the_rate():
    clock = Clock(100.0)
    mon = LinkMonitor(clock=clock)
    run(mon, clock, rate=12.5e6, rtt=0.010, nbytes=125_000, n=10)
    before = mon.stats().delivery_rate
    for _ in range(10):  # tiny messages with nothing behind them: demand, not capacity
        token = mon.on_send(1000, backlog=False)
        clock.t += 0.010
        mon.on_ack(token)
    assert mon.stats().delivery_rate == pytest.approx(before)


def test_logical_rate_counts_uncompressed_bytes():
    clock = Clock(100.0)
    mon = LinkMonitor(clock=clock)
    for _ in range(5):
        token = mon.on_send(1000, 4000, backlog=True)
        clock.t += 0.01
        mon.on_ack(token)
    s = mon.stats()
    assert s.logical_rate == pytest.approx(4 * s.delivery_rate)


def test_idle_link_asks_for_a_probe_and_lost_messages_are_forgotten():
    clock = Clock(100.0)
    mon = LinkMonitor(probe_idle_s=1.0, clock=clock)
    token = mon.on_send(5000, backlog=False)
    clock.t += 5
    assert not mon.due_probe()  # something is in flight
    mon.on_lost(token)
    assert mon.stats().in_flight_bytes == 0
    assert mon.due_probe()


def test_min_rtt_comes_from_messages_sent_alone_and_goes_stale_under_steady_load():
    """Messages sent back to back wait behind each other: their round trips say nothing of
    the path. Only a message with nothing ahead of it sets min RTT; under steady load the
    monitor asks for a drain once its last such sample is older than drain_every_s."""
    clock = Clock(100.0)
    mon = LinkMonitor(drain_every_s=4.0, clock=clock)
    assert mon.stats().rtt_stale  # nothing measured yet
    run(mon, clock, rate=12.5e6, rtt=0.010, nbytes=125_000, n=1)  # alone: 10 ms + 10 ms on the wire
    assert mon.stats().min_rtt == pytest.approx(0.020) and not mon.stats().rtt_stale
    # then 5 s of ten in flight, a new one sent at each ack: each waits ~100 ms behind the others
    flight = [mon.on_send(125_000, backlog=True) for _ in range(10)]
    clock.t += 0.010  # the first is alone on the wire: acked after 20 ms, the others 10 ms apart
    for _ in range(500):
        clock.t += 0.010
        mon.on_ack(flight.pop(0))
        flight.append(mon.on_send(125_000, backlog=True))
    for token in flight:
        clock.t += 0.010
        mon.on_ack(token)
    s = mon.stats()
    assert s.min_rtt == pytest.approx(0.020)  # the queued round trips did not count
    assert s.rtt_stale
    run(mon, clock, rate=12.5e6, rtt=0.010, nbytes=125_000, n=1)  # the drain: one alone again
    assert not mon.stats().rtt_stale


def test_only_small_messages_time_the_fixed_cost_and_the_path():
    """A large message's call, service and log sync take longer for its bytes, and its
    round trip includes its own time on the wire: counted as "fixed", a larger batch would
    measure a larger cost and size a larger batch again. Only small messages count (sent
    alone, for the path)."""
    clock = Clock(100.0)
    mon = LinkMonitor(min_bytes=64_000, drain_every_s=4.0, clock=clock)
    for submit_s in (0.001, 0.0002):  # the first call to an actor costs more, and does not count
        token = mon.on_send(60_000, backlog=False, submit_s=submit_s)
        clock.t += 0.010 + 60_000 / 125e6  # 10 ms + its bytes at 1 Gbit
        mon.on_ack(token, service_s=0.001, fixed_s=0.0003)
    # the call, and what the message cost the destination (as it reports it, not its wall
    # time), run at once in two processes: the slower one is the cost
    assert mon.stats().per_message_s == pytest.approx(0.0003)
    assert mon.stats().min_rtt == pytest.approx(0.010 + 60_000 / 125e6 - 0.001)
    for _ in range(50):  # 5 s of 1 MB messages, each alone: 2 ms to send, 1.5 ms to sync
        token = mon.on_send(1_000_000, backlog=False, submit_s=0.002)
        clock.t += 0.1
        mon.on_ack(token, service_s=0.004, fixed_s=0.0015)
    s = mon.stats()
    assert s.per_message_s == pytest.approx(0.0003) and s.min_rtt == pytest.approx(
        0.010 + 60_000 / 125e6 - 0.001
    )
    assert s.rtt_stale  # time to drain with a small message


def test_waiting_at_a_busy_destination_is_not_queueing_in_the_network():
    """Three in flight to a shard that stalls (an index growing): the round trips grow by
    the shard's service of the messages ahead, which its busy total reports, not the link."""
    clock = Clock(100.0)
    mon = LinkMonitor(clock=clock)
    busy = 0.0
    for _ in range(5):  # alone on the link: 11 ms each, the shard idle
        token = mon.on_send(1_000_000, backlog=True)
        clock.t += 0.011
        mon.on_ack(token, busy_s=busy)
    flight = [mon.on_send(1_000_000, backlog=True) for _ in range(3)]
    for service in (0.3, 0.3, 0.3, 0.3, 0.3, 0.3):  # each waits ~0.3 s behind the one before
        clock.t += service
        busy += service
        mon.on_ack(flight.pop(0), service_s=service, busy_s=busy)
        flight.append(mon.on_send(1_000_000, backlog=True))
    s = mon.stats()
    assert s.queueing_delay < 0.01
    assert s.receiver_share > 0.8  # smoothed, from 0
    # the same round trips with no busy total: the wait counts as the network's
    blind = LinkMonitor(clock=clock)
    run(blind, clock, rate=100e6, rtt=0.001, nbytes=1_000_000, n=5)
    flight = [blind.on_send(1_000_000, backlog=True) for _ in range(3)]
    for _ in range(6):
        clock.t += 0.3
        blind.on_ack(flight.pop(0), service_s=0.3)
        flight.append(blind.on_send(1_000_000, backlog=True))
    assert blind.stats().queueing_delay > 0.2


def test_a_stalled_destination_does_not_lower_the_rate():
    """Rate samples of messages that waited on a busy shard show the shard, not the link;
    and with no sample in the rate window (a stall longer than it) the last one stands."""
    clock = Clock(100.0)
    mon = LinkMonitor(rate_window_s=1.0, clock=clock)
    busy = 0.0
    for _ in range(10):
        token = mon.on_send(1_000_000, backlog=True)
        clock.t += 0.011
        mon.on_ack(token, busy_s=busy)
    before = mon.stats().delivery_rate
    assert before == pytest.approx(1_000_000 / 0.011)
    token = mon.on_send(1_000_000, backlog=True)
    clock.t += 1.5  # the shard spends 1.5 s on it (its index grows)
    busy += 1.49
    assert mon.stats().delivery_rate == pytest.approx(
        before
    )  # no sample for a second: the last stands
    mon.on_ack(token, service_s=1.49, busy_s=busy)
    assert mon.stats().delivery_rate == pytest.approx(before)


def test_windowed_high_matches_the_percentile_of_what_the_window_holds():
    # The capacity and logical rate are the 80th percentile of a minute of samples, kept
    # sorted as samples come and go: it must equal sorting what the window holds.
    import random

    from vifusion.comm.link import _high, _Samples

    rng = random.Random(7)
    samples, held = _Samples(), []
    for i in range(3000):
        now = i * 0.01
        rate = float(rng.choice([rng.uniform(1e6, 2e8), 5e7]))  # ties too
        samples.append(now, rate)
        held.append((now, rate))
        samples.expire(now, 5.0)
        while len(held) > 1 and now - held[0][0] > 5.0:
            held.pop(0)
        assert samples.high() == _high(sorted(r for _, r in held))
    samples.expire(1e9, 5.0)  # long quiet: the newest sample stands
    assert samples.high() == held[-1][1]


def test_bunched_acknowledgements_do_not_read_faster_than_the_pipe_carries():
    # Two 100 kB messages in flight over a 100 MB/s link to a destination whose service
    # time jitters (0.2-3 ms): messages queue there, and their acknowledgements come
    # bunched. Over the ack interval alone the rate read 1.4x what the pipe carried.
    rnd = random.Random(1)
    clock = Clock(100.0)
    mon = LinkMonitor(clock=clock)
    nbytes, wire = 100_000, 1e-3
    link_free = dest_free = 0.0
    in_flight: list[tuple[float, int]] = []

    def send(t: float) -> None:
        nonlocal link_free, dest_free
        clock.t = 100.0 + t
        token = mon.on_send(nbytes, backlog=True)
        link_free = max(t, link_free) + wire
        dest_free = max(link_free, dest_free) + rnd.uniform(0.2e-3, 3e-3)
        heapq.heappush(in_flight, (dest_free, token))

    send(0.0)
    send(0.0)
    for _ in range(400):
        t, token = heapq.heappop(in_flight)
        clock.t = 100.0 + t
        mon.on_ack(token)
        send(t)
    carried = 400 * nbytes / t
    s = mon.stats()
    assert s.capacity == pytest.approx(carried, rel=0.1)
    assert s.delivery_rate == pytest.approx(carried, rel=0.1)


@pytest.mark.parametrize(
    "args, named",
    [
        (
            dict(rate_window_s=90.0, capacity_window_s=60.0),
            ("rate_window_s=90.0", "capacity_window_s=60.0"),
        ),
        (dict(rate_window_s=0.0), ("rate_window_s=0.0",)),
        (dict(rtt_window_s=-1.0), ("rtt_window_s=-1.0",)),
        (dict(drain_every_s=0.0), ("drain_every_s=0.0",)),
        (dict(probe_idle_s=-0.5), ("probe_idle_s=-0.5",)),
        (dict(min_bytes=0), ("min_bytes=0",)),
    ],
)
def test_refuses_windows_out_of_order_or_range(args: dict, named: tuple[str, ...]) -> None:
    # The capacity is what the link carried over the longer window, the delivery rate over
    # the shorter: inverted, "capacity" would read less than the rate it is meant to bound.
    message = refusal(LinkMonitor, **args)
    for text in named:
        assert text in message
