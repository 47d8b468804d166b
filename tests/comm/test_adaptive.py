import itertools
from dataclasses import replace

import pytest

from vifusion.comm import CodecPolicy, LinkStats, Rung

LADDER = [
    Rung("fp32", 6656),
    Rung("fp16", 3328),
    Rung("int8", 1672),
    Rung("sparse", 840),
    Rung("pq", 416),
]
MB = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def link(
    rate: float, *, logical: float = 12.5 * MB, qdelay: float = 0.0, backlog: float = 0.0
) -> LinkStats:
    return LinkStats(
        delivery_rate=rate,
        capacity=12.5 * MB,
        path_rate=rate,
        logical_rate=logical,
        min_rtt=0.01,
        queueing_delay=qdelay,
        backlog_age=backlog,
        in_flight_bytes=0,
        in_flight=2,
        acked_bytes=0,
        acked_messages=100,
        service_s=0.0,
        per_message_s=0.001,
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


def test_an_old_backlog_on_a_saturated_clear_link_is_not():
    # the sender offers more than the link carries: data waits, but the link carries what it
    # always did, and the rows it carries stay exact
    clock = Clock()
    policy = CodecPolicy(LADDER, backlog_s=0.5, clock=clock)
    assert feed(policy, clock, link(11.0 * MB, backlog=2.0), 200) == 0


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
    ],
)
def test_refuses_thresholds_out_of_order_or_range(args: dict, named: tuple[str, ...]) -> None:
    # ``drop`` is the deep fall (any backlog) and ``sag`` the shallow one (an old backlog):
    # a drop above the sag would make the sag test one that never decides anything.
    with pytest.raises(ValueError) as err:
        CodecPolicy(LADDER, **args)
    for text in named:
        assert text in str(err.value)
