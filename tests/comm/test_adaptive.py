import itertools
from dataclasses import replace

import pytest

from tests._helpers import Clock, link_stats
from vifusion.comm import CodecPolicy, LinkMonitor, LinkStats, Rung

LADDER = [
    Rung("fp32", 6656),
    Rung("fp16", 3328),
    Rung("int8", 1672),
    Rung("sparse", 840),
    Rung("pq", 416),
]
MB = 1_000_000


def link(
    rate: float,
    *,
    logical: float = 12.5 * MB,
    qdelay: float = 0.0,
    backlog: float = 0.0,
    in_flight_bytes: int = 0,
) -> LinkStats:
    return link_stats(
        rate,
        capacity=12.5 * MB,
        logical_rate=logical,
        queueing_delay=qdelay,
        backlog_age=backlog,
        in_flight_bytes=in_flight_bytes,
        in_flight=2,
        acked_messages=100,
    )


def feed(policy: CodecPolicy, clock: Clock, stats: LinkStats, n: int, dt: float = 0.05) -> int:
    for _ in range(n):
        clock.t += dt
        level = policy.update(stats)
    return level


def test_never_compresses_on_a_clear_link():
    clock = Clock()
    policy = CodecPolicy(LADDER, clock=clock)
    # saturated but clear: the link carries what it carried, no queue, no old backlog
    assert feed(policy, clock, link(12.5 * MB), 200) == 0
    assert policy.history == [(0.0, 0)]


def test_escalates_straight_to_the_least_lossy_codec_that_fits():
    clock = Clock()
    policy = CodecPolicy(LADDER, samples=3, clock=clock)
    squeezed = link(1.25 * MB, qdelay=0.2)  # 100 -> 10 Mbit; the data needs 12.5 MB/s of fp32
    assert feed(policy, clock, squeezed, 2) == 0  # two samples are not yet a trend
    level = feed(policy, clock, squeezed, 1)
    # 1878 rows/s must fit in 0.9 x 1.25 MB/s = 599 B/row: pq (416) is the first that does
    assert LADDER[level].name == "pq"
    assert len(policy.history) == 2  # one step, not one level at a time
    half = CodecPolicy(LADDER, clock=clock)
    assert (
        LADDER[feed(half, clock, link(6.25 * MB, qdelay=0.2), 3)].name == "int8"
    )  # 3328 B/row would be 100%: no headroom


def test_an_old_backlog_on_a_link_that_carries_less_is_congestion():
    clock = Clock()
    policy = CodecPolicy(LADDER, backlog_s=0.5, clock=clock)
    assert feed(policy, clock, link(6.25 * MB, backlog=0.8), 3) > 0


def test_a_saturated_link_steps_down_the_ladder_as_rows_queue_for_it():
    """The sender offers more than the link carries: it delivers its capacity, and rows
    wait at the sender for room in the window (20 ms: four messages' time at 100 Mbit). In
    fewer bytes a row the link moves more rows, so the policy compresses, one codec at a
    time as the rows it carries (the logical rate) grow."""
    clock = Clock()
    ladder = LADDER[:3]  # what keeps recall on these features: the table codecs gated off
    policy = CodecPolicy(ladder, clock=clock)
    full = link(12.5 * MB, backlog=0.02, in_flight_bytes=2 * 64 * 1024)  # 5 ms a message
    assert feed(policy, clock, full, 3) == 0  # a moment's wait is not yet saturation
    assert ladder[feed(policy, clock, full, 20)].name == "fp16"  # exact fp32 would not fit
    # in fp16 the link carries twice the rows, and rows still wait: int8
    assert ladder[feed(policy, clock, replace(full, logical_rate=25 * MB), 3)].name == "int8"
    # still saturated in int8: the ladder ends where recall would fall, and it stays there
    assert feed(policy, clock, replace(full, logical_rate=50 * MB), 100) == 2
    assert [level for _, level in policy.history] == [0, 1, 2]


def test_once_compressed_for_saturation_a_link_still_full_steps_further():
    """In fp16 the batches are sized up and rows wait under 1.5 messages' time, but the link
    still delivers its capacity while they wait: it is still what holds them."""
    clock = Clock()
    ladder = LADDER[:3]
    policy = CodecPolicy(ladder, clock=clock)
    full = link(12.5 * MB, backlog=0.02, in_flight_bytes=2 * 64 * 1024)
    assert ladder[feed(policy, clock, full, 20)].name == "fp16"
    still = replace(full, backlog_age=0.004, logical_rate=25 * MB, in_flight_bytes=2 * 128 * 1024)
    assert ladder[feed(policy, clock, still, 20)].name == "int8"


def test_a_clear_fast_link_that_the_sender_cannot_fill_stays_exact():
    """1 Gbit, the sender bound by its CPU: the link delivers near its capacity, but each
    batch leaves as it fills, so rows wait less than a message's time (or not at all)."""
    clock = Clock()
    policy = CodecPolicy(LADDER, clock=clock)
    gbit = 125 * MB
    cpu_bound = replace(
        link(0.9 * gbit, logical=0.9 * gbit, backlog=0.002, in_flight_bytes=2 * 240 * 1024),
        capacity=gbit,
    )
    assert feed(policy, clock, cpu_bound, 200) == 0
    assert feed(policy, clock, replace(cpu_bound, backlog_age=0.0), 200) == 0
    assert policy.history == [(0.0, 0)]


def test_a_saturated_link_as_fast_as_the_encoder_stays_exact():
    """Rows queue for a 1 Gbit link, but encoding a row costs a fifth of the wire time it
    would save: the CPU that would encode is the one the sender runs on. At 100 Mbit the
    same encoder costs a fiftieth of the saving, and the link is compressed."""
    encode = [0.0, 8e-6, 6e-6, 8e-6, 30e-6]  # s a row: fp32, fp16, int8, sparse, pq
    for rate, compressed in ((125 * MB, False), (12.5 * MB, True)):
        clock = Clock()
        policy = CodecPolicy(LADDER, clock=clock)
        full = replace(
            link(rate, logical=rate, backlog=0.05, in_flight_bytes=2 * 256 * 1024), capacity=rate
        )
        for _ in range(100):
            clock.t += 0.05
            policy.update(full, encode)
        assert (policy.level > 0) == compressed


def test_a_codec_tried_before_its_encoding_was_timed_is_left_once_it_does_not_pay():
    """Saturated, a link tries a codec whose encoding is not timed yet. Its first batch pays
    for warming up (a timing far over the settled one), so it is judged only after a few
    samples: at 1 Gbit neither fp16 nor int8 pays, and the link ends in exact fp32; at 100
    Mbit int8 does, and the link keeps it."""
    settled = {1: 8e-6, 2: 6e-6}  # s a row, as the sender's average settles
    for rate, exact in ((125 * MB, True), (12.5 * MB, False)):
        clock = Clock()
        policy = CodecPolicy(LADDER[:3], clock=clock)
        full = replace(
            link(rate, logical=rate, backlog=0.05, in_flight_bytes=2 * 256 * 1024), capacity=rate
        )
        encode = [0.0, 0.0, 0.0]
        for _ in range(200):
            clock.t += 0.05
            level = policy.update(full, encode)
            if level:
                encode[level] = settled[level] if encode[level] else 100e-6
        assert (policy.level == 0) == exact


def test_a_descheduled_sender_or_one_that_drains_its_window_is_not_saturated():
    """Rows that waited a moment (the sender's process waited for a core), or while the
    sender holds one message in flight to time the path (``rtt_stale``), waited for the
    sender, not the link."""
    clock = Clock()
    policy = CodecPolicy(LADDER, clock=clock)
    clear = link(12.5 * MB, backlog=0.002, in_flight_bytes=2 * 64 * 1024)
    for _ in range(20):
        feed(policy, clock, clear, 18)
        feed(policy, clock, replace(clear, backlog_age=0.05), 2)  # 10 messages' time, 0.1 s
    draining = replace(clear, backlog_age=0.05, rtt_stale=True)
    assert feed(policy, clock, draining, 100) == 0
    assert policy.history == [(0.0, 0)]


def test_steps_back_once_the_backlog_drains_and_the_link_has_room():
    clock = Clock()
    policy = CodecPolicy(LADDER[:3], calm_s=0.75, clock=clock)
    full = link(12.5 * MB, backlog=0.02, in_flight_bytes=2 * 64 * 1024)
    feed(policy, clock, full, 20)
    feed(policy, clock, replace(full, logical_rate=25 * MB), 3)
    assert policy.level == 2
    # rows no longer wait, but the last second's rows (24 MB/s of fp32) would need 12 MB/s
    # in fp16, over 0.9 of the 12.5 the link carries: stepping back would saturate it again
    drained = replace(link(7 * MB, logical=25 * MB), recent_logical_rate=24 * MB)
    assert feed(policy, clock, drained, 40, dt=0.25) == 2
    # the sender offers less: 16 MB/s of fp32 is 8 in fp16, which fits; in fp32 it would
    # not, so it holds fp16
    lighter = replace(drained, recent_logical_rate=16 * MB)
    assert feed(policy, clock, lighter, 40, dt=0.25) == 1
    # the load falls to what fits in fp32: back to exact
    assert feed(policy, clock, replace(drained, recent_logical_rate=8 * MB), 40, dt=0.25) == 0


def test_a_monitored_link_that_queues_rows_is_saturated_and_a_cpu_bound_one_is_not():
    """The real monitor, fed sends and acknowledgements: a 100 Mbit link kept full by a
    window of three 64 KiB messages while rows wait for it, against a 1 Gbit link that gets
    a message whenever the sender has one ready, rows waiting only while a batch fills."""

    def run(rate: float, gap_s: float, backlog_s: float, messages: int = 400) -> int:
        clock = Clock()
        mon = LinkMonitor(clock=clock)
        policy = CodecPolicy(LADDER[:3], clock=clock)
        nbytes, window, sent = 64 * 1024, 3, []
        level = 0
        for _ in range(messages):
            while len(sent) < window:
                sent.append((mon.on_send(nbytes, backlog=True), clock.t))
                clock.t += gap_s  # the sender's own time per message
            token, _ = sent.pop(0)
            clock.t += nbytes / rate  # the link drains one message
            mon.set_backlog_age(backlog_s)
            mon.on_ack(token, service_s=0.0002)
            level = policy.update(mon.stats())
        return level

    assert run(12.5 * MB, gap_s=0.0, backlog_s=0.02) > 0  # 100 Mbit, rows wait 4 messages
    assert run(125 * MB, gap_s=0.0005, backlog_s=0.0003) == 0  # 1 Gbit, the sender's pace


def test_the_recent_logical_rate_follows_the_last_second_the_logical_rate_the_minute():
    clock = Clock()
    mon = LinkMonitor(clock=clock)
    for rows_s in (0.01, 0.04):  # 400 kB/s of fp32, then a quarter of it
        for _ in range(100):
            token = mon.on_send(1000, 4000, backlog=True)
            clock.t += rows_s
            mon.on_ack(token)
    s = mon.stats()
    assert s.recent_logical_rate == pytest.approx(100_000, rel=0.01)
    assert s.logical_rate == pytest.approx(400_000, rel=0.01)


def test_holds_while_congested_then_steps_back_one_level_at_a_time():
    clock = Clock()
    policy = CodecPolicy(LADDER, calm_s=0.75, clock=clock)
    feed(policy, clock, link(1.25 * MB, qdelay=0.2), 3)
    top = policy.level
    assert feed(policy, clock, link(1.25 * MB, qdelay=0.2), 40) == top  # holds
    # squeezed still, but calm (the compressed data fits): stepping back would not fit: hold
    assert feed(policy, clock, link(1.25 * MB), 40) == top
    # the link recovers: one level per calm period, back to exact fp32
    recovered = link(12.5 * MB, logical=12.5 * MB)
    levels = [feed(policy, clock, recovered, 1, dt=0.25) for _ in range(20)]
    assert levels[-1] == 0
    steps = [b for a, b in zip([top, *levels], levels, strict=False) if a != b]
    assert steps == list(range(top - 1, -1, -1))
    times = [t for t, _ in policy.history[-top:]]
    assert all(b - a >= 0.75 for a, b in itertools.pairwise(times))


def test_a_link_delivering_its_capacity_is_not_squeezed_whatever_an_old_path_sample_says():
    """Path samples come from messages sent alone, which a busy sender seldom sends: after
    the link recovers, the last one may be from the squeeze. Delivering the line rate in
    int8 says otherwise, and the policy steps back."""
    clock = Clock()
    policy = CodecPolicy(LADDER, calm_s=0.75, clock=clock)
    feed(policy, clock, link(1.25 * MB, qdelay=0.2), 3)
    assert policy.level > 0
    stale_path = replace(link(12.5 * MB), path_rate=1.25 * MB)
    assert feed(policy, clock, stale_path, 40, dt=0.25) == 0
    still_squeezed = replace(link(1.25 * MB), path_rate=1.25 * MB)
    feed(policy, clock, link(1.25 * MB, qdelay=0.2), 3)
    top = policy.level
    assert feed(policy, clock, still_squeezed, 40, dt=0.25) == top


def test_no_compression_when_encoding_costs_more_than_it_saves():
    clock = Clock()
    policy = CodecPolicy(LADDER, clock=clock)
    # at 6.25 MB/s int8 saves 0.8 ms a row; an encoder that takes 1 ms a row is not worth it
    slow_int8 = [0.0, 1e-7, 1e-3, 1e-7, 1e-7]
    squeezed = link(6.25 * MB, qdelay=0.2)
    for _ in range(3):
        clock.t += 0.05
        policy.update(squeezed, slow_int8)
    assert LADDER[policy.level].name == "sparse"


def test_disabled_policy_stays_exact():
    clock = Clock()
    policy = CodecPolicy(LADDER, enabled=False, clock=clock)
    assert feed(policy, clock, replace(link(1.25 * MB), queueing_delay=1.0), 50) == 0


def test_a_busy_destination_is_not_congestion():
    # a shard that spends most of each round trip serving: the delivery rate falls and data
    # waits, but fewer bytes would not be served sooner
    clock = Clock()
    policy = CodecPolicy(LADDER, clock=clock)
    stalled = replace(link(3 * MB, qdelay=0.2, backlog=0.8), receiver_share=0.9)
    assert feed(policy, clock, stalled, 20) == 0
    assert (
        feed(policy, clock, replace(stalled, receiver_share=0.1), 3) > 0
    )  # the link itself: congestion


def test_a_squeeze_is_met_at_once_while_the_path_rate_is_from_before_it():
    # congested at 1.25 MB/s, but the last messages sent alone (the path rate) crossed the
    # link before the squeeze: the delivery rate of the congested link is what it carries now
    clock = Clock()
    policy = CodecPolicy(LADDER, clock=clock)
    squeezed = replace(link(1.25 * MB, qdelay=0.3), path_rate=12.5 * MB)
    assert LADDER[feed(policy, clock, squeezed, 3)].name == "pq"


@pytest.mark.parametrize(
    "args, named",
    [
        (dict(drop=0.9, sag=0.8), ("drop=0.9", "sag=0.8")),
        (dict(sag=1.2), ("sag=1.2",)),
        (dict(headroom=0.0), ("headroom=0.0",)),
        (dict(receiver_bound=-0.1), ("receiver_bound=-0.1",)),
        (dict(samples=0), ("samples=0",)),
        (dict(delay_s=0.0), ("delay_s=0.0",)),
        (dict(calm_s=-1.0), ("calm_s=-1.0",)),
        (dict(backlog_s=-1.0), ("backlog_s=-1.0",)),
        (dict(backlog_messages=0.0), ("backlog_messages=0.0",)),
        (dict(encode_margin=0.5), ("encode_margin=0.5",)),
    ],
)
def test_refuses_thresholds_out_of_order_or_range(args: dict, named: tuple[str, ...]) -> None:
    # ``drop`` is the deep fall (any backlog) and ``sag`` the shallow one (an old backlog):
    # a drop above the sag would make the sag test one that never decides anything.
    with pytest.raises(ValueError) as err:
        CodecPolicy(LADDER, **args)
    for text in named:
        assert text in str(err.value)


def test_a_floor_starts_the_link_there_and_it_never_steps_back_past_it():
    """A plan's codec floor: a link known to be narrow starts compressed, climbs further
    when congested and steps back on calm only as far as the floor."""
    clock = Clock()
    policy = CodecPolicy(LADDER, floor=1, calm_s=0.75, clock=clock)
    assert policy.level == 1 and policy.history == [(0.0, 1)]
    assert feed(policy, clock, link(1.25 * MB, qdelay=0.2), 3) == LADDER.index(Rung("pq", 416))
    recovered = link(12.5 * MB, logical=12.5 * MB)
    assert feed(policy, clock, recovered, 40, dt=0.25) == 1  # exact rows would fit: held at fp16
    assert min(level for _, level in policy.history) == 1


def test_a_floor_outside_the_ladder_is_refused():
    with pytest.raises(ValueError, match="floor=5"):
        CodecPolicy(LADDER, floor=5)
