from dataclasses import replace

import pytest

from tests._helpers import link_stats, refusal
from vifusion.comm import LinkStats
from vifusion.fusion import FlushPolicy


def link(rate: float, min_rtt: float, per_message_s: float, rtt_stale: bool = False) -> LinkStats:
    return link_stats(rate, min_rtt=min_rtt, per_message_s=per_message_s, rtt_stale=rtt_stale)


MB = 1_000_000


def test_batch_makes_the_fixed_cost_a_tenth_of_the_transfer():
    policy = FlushPolicy(latency_target_s=1.0)
    plan = policy.plan(link(rate=12.5 * MB, min_rtt=0.01, per_message_s=0.002))  # 100 Mbit
    assert plan.max_bytes == 250_000  # 2 ms x 12.5 MB/s / 0.1
    # the fixed cost is then 10% of the time the batch takes on the wire
    assert abs(0.002 / (plan.max_bytes / (12.5 * MB)) - 0.1) < 1e-9


def test_batch_is_sized_from_the_capacity_not_from_what_small_batches_carried():
    # small batches carried 6 MB/s of a link that carried 12.5: B sized from 6 MB/s would
    # carry less again, down to the minimum; the latency bound still follows the rate now
    policy = FlushPolicy(latency_target_s=1.0)
    slowed = replace(link(rate=6 * MB, min_rtt=0.01, per_message_s=0.002), capacity=12.5 * MB)
    assert policy.plan(slowed).max_bytes == 250_000
    squeezed = replace(slowed, delivery_rate=0.3 * MB)
    assert policy.plan(squeezed).max_bytes == int(0.3 * MB / 4)


def test_window_covers_the_bandwidth_delay_product_and_no_more():
    policy = FlushPolicy(latency_target_s=1.0)
    plan = policy.plan(link(rate=12.5 * MB, min_rtt=0.095, per_message_s=0.002))
    # BDP = 12.5 MB/s x 97 ms = 1.21 MB, and a 250 kB batch's 184 kB more on the wire than the
    # 64 KiB that timed min RTT: 5.6 batches, 5.85 with the small message of slack. Five
    # would leave the link idle part of each round trip; a seventh would only wait in a queue.
    assert plan.max_bytes == 250_000 and plan.window == 6


def test_the_window_holds_one_small_message_more_than_the_bandwidth_delay_product():
    # a window of exactly the measured BDP would leave the link idle at each round trip's
    # jitter, and could never measure more than it measured
    policy = FlushPolicy(latency_target_s=10.0)  # B stays min_bytes: 64 KiB
    plan = policy.plan(
        link(rate=12.5 * MB, min_rtt=0.0134, per_message_s=0.0001)
    )  # 100 Mbit / 5 ms
    # BDP = 12.5 MB/s x 13.5 ms = 169 kB = 2.6 messages of 64 KiB; with one more, 3.6
    assert plan.max_bytes == 64 << 10 and plan.window == 4


def test_the_window_counts_a_batch_s_own_time_on_the_wire():
    # min RTT is timed with small messages; a 1.25 MB batch spends 10 ms on a 1 Gbit wire
    # besides: a round trip of 13 ms, 1.6 MB in flight, so 2 batches
    policy = FlushPolicy(latency_target_s=1.0, min_bytes=0, min_window=1)
    plan = policy.plan(
        replace(link(rate=125 * MB, min_rtt=0.002, per_message_s=0.001), capacity=125 * MB)
    )
    assert plan.max_bytes == 1_250_000
    assert plan.window == 2  # without its own bytes: 0.375 MB / 1.25 MB, 1


def test_a_destination_slower_than_the_link_sets_the_window():
    # a 1.25 MB batch takes 10 ms on a 1 Gbit wire and 20 ms to serve: the pipe moves 62.5
    # MB/s, so a 33 ms round trip holds 2.06 MB, 2 batches (at the link's 125 MB/s the
    # window would be 4, and two of them would queue at the destination)
    policy = FlushPolicy(latency_target_s=1.0, min_bytes=0, min_window=1)
    slow = replace(link(rate=125 * MB, min_rtt=0.002, per_message_s=0.001), service_s=0.020)
    plan = policy.plan(slow)
    assert plan.max_bytes == 1_250_000 and plan.window == 2


def test_latency_target_bounds_the_batch_and_the_age():
    policy = FlushPolicy(latency_target_s=0.2, min_bytes=1024)
    plan = policy.plan(
        link(rate=1.25 * MB, min_rtt=0.01, per_message_s=0.05)
    )  # slow link, costly messages
    assert plan.max_bytes == int(
        1.25 * MB * 0.2 / 4
    )  # a batch takes at most a quarter of the target
    assert plan.max_age_s == 0.05


def test_bounds_hold_at_both_ends():
    policy = FlushPolicy(
        latency_target_s=10.0, min_bytes=64 << 10, max_bytes=4 << 20, max_window=16
    )
    tiny = policy.plan(link(rate=10 * MB, min_rtt=0.001, per_message_s=1e-6))
    assert (
        tiny.max_bytes == 64 << 10 and tiny.window == 2
    )  # one at the receiver while the next travels
    huge = policy.plan(link(rate=1000 * MB, min_rtt=1.0, per_message_s=0.1))
    assert huge.max_bytes == 4 << 20 and huge.window == 16


def test_compressed_links_gather_more_rows_for_the_same_wire_bytes():
    policy = FlushPolicy(latency_target_s=1.0)
    exact = policy.plan(link(rate=12.5 * MB, min_rtt=0.01, per_message_s=0.002))
    int8 = policy.plan(link(rate=12.5 * MB, min_rtt=0.01, per_message_s=0.002), wire_ratio=0.25)
    assert int8.max_bytes == 4 * exact.max_bytes


def test_unmeasured_link_gets_a_modest_start_alone_on_the_link():
    plan = FlushPolicy().plan(None)
    assert (
        plan.max_bytes == 64 << 10 and plan.window == 1
    )  # a small message alone: the path's own round trip


def test_a_stale_min_rtt_drains_to_one_small_message():
    policy = FlushPolicy(latency_target_s=1.0)
    fresh = policy.plan(link(rate=12.5 * MB, min_rtt=0.095, per_message_s=0.002))
    stale = policy.plan(link(rate=12.5 * MB, min_rtt=0.095, per_message_s=0.002, rtt_stale=True))
    assert fresh.window == 6 and stale.window == 1
    # small, so that its round trip is the path's and its cost the per-message floor
    assert fresh.max_bytes == 250_000 and stale.max_bytes == policy.min_bytes


def test_a_batch_just_past_the_inline_limit_is_cut_to_ride_inline():
    policy = FlushPolicy(latency_target_s=1.0, inline_bytes=96 << 10)
    just_past = policy.plan(link(rate=12.5 * MB, min_rtt=0.01, per_message_s=0.0009))  # 112.5 kB
    assert just_past.max_bytes == (96 << 10) - (4 << 10)
    well_past = policy.plan(
        link(rate=12.5 * MB, min_rtt=0.01, per_message_s=0.002)
    )  # 250 kB: worth the store
    assert well_past.max_bytes == 250_000
    # the shard stream has no inline limit: the batch stays what the fixed cost calls for
    on_stream = policy.plan(
        link(rate=12.5 * MB, min_rtt=0.01, per_message_s=0.0009), by_stream=True
    )
    assert on_stream.max_bytes == 112_500


@pytest.mark.parametrize(
    "args, named",
    [
        (dict(min_bytes=2 << 20, max_bytes=1 << 20), ("min_bytes=2097152", "max_bytes=1048576")),
        (dict(min_window=8, max_window=4), ("min_window=8", "max_window=4")),
        (dict(min_bytes=-1), ("min_bytes=-1",)),
        (dict(min_window=0), ("min_window=0",)),
        (dict(overhead_share=1.5), ("overhead_share=1.5",)),
        (dict(overhead_share=0.0), ("overhead_share=0.0",)),
        (dict(latency_target_s=0.0), ("latency_target_s=0.0",)),
    ],
)
def test_refuses_inverted_or_out_of_range_limits(args: dict, named: tuple[str, ...]) -> None:
    # A policy built from nonsense would size every batch from it, silently; it says which
    # settings disagree, with their values, when it is built.
    message = refusal(FlushPolicy, **args)
    for text in named:
        assert text in message
