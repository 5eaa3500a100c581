"""The adaptive in-flight limit: Little's law on recent answers, the deadline's share as the latency target,
the configured bounds as guard rails, Retry-After from the drain time, each caller's share. A clock the test
moves: no sleeps."""

import pytest

from food11_api.admission import AdaptiveLimit


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def limit_with(target_s=30.0, min_limit=1, max_limit=64, smoothing=0.25, unmeasured_retry_after_s=2, caller_share=1.0):
    clock = Clock()
    limit = AdaptiveLimit(
        target_s,
        min_limit,
        max_limit,
        unmeasured_retry_after_s,
        caller_share=caller_share,
        smoothing=smoothing,
        clock=clock,
    )
    return limit, clock


def answer_batch(limit: AdaptiveLimit, clock: Clock, count: int, seconds: float) -> None:
    """``count`` requests admitted together and answered ``seconds`` later."""
    admitted = [limit.try_admit() for _ in range(count)]
    assert None not in admitted
    clock.now += seconds
    for ticket in admitted:
        limit.finished(ticket, answered=True)


def answer_in_order(limit: AdaptiveLimit, clock: Clock, count: int, each_s: float) -> None:
    """``count`` requests admitted together and answered one after another, each ``each_s`` after the last."""
    admitted = [limit.try_admit() for _ in range(count)]
    assert None not in admitted
    for ticket in admitted:
        clock.now += each_s
        limit.finished(ticket, answered=True)


def test_before_any_answer_the_limit_is_the_minimum_and_retry_after_the_fallback():
    limit, _ = limit_with(min_limit=2, unmeasured_retry_after_s=7)
    assert limit.limit == 2 and limit.rate_per_s is None
    assert limit.try_admit() and limit.try_admit()
    assert limit.try_admit() is None  # refused at once past it
    assert limit.retry_after_s() == 7


def test_one_answer_places_the_limit_where_the_rate_answers_within_the_target():
    """One request alone answered in 3 s: 1/3 per second, so 10 requests are answered within 30 s."""
    limit, clock = limit_with(target_s=30.0)
    answer_batch(limit, clock, 1, 3.0)
    assert limit.rate_per_s == pytest.approx(1 / 3)
    assert limit.limit == 10


def test_the_limit_follows_a_machine_that_slows_down_and_recovers():
    limit, clock = limit_with(target_s=30.0)
    answer_batch(limit, clock, 1, 3.0)  # 1/3 per second: 10
    for _ in range(12):
        answer_in_order(limit, clock, limit.limit, 9.0)  # at the limit, three times slower
    assert limit.limit == 3
    for _ in range(12):
        answer_in_order(limit, clock, limit.limit, 1.0)  # at the limit, 1 per second
    assert limit.rate_per_s == pytest.approx(1.0, rel=1e-3)
    assert limit.limit in (29, 30)  # the average comes from below


def test_a_quiet_spell_does_not_shrink_the_limit():
    """One request now and then is answered at the pipeline's own pace: its n / W is that pace, not the
    arrival rate (the idle time between requests is nobody's latency)."""
    limit, clock = limit_with(target_s=30.0)
    answer_batch(limit, clock, 1, 1.0)  # 1 per second: limit 30
    for _ in range(10):
        clock.now += 60.0  # nobody for a minute
        answer_batch(limit, clock, 1, 1.0)
    assert limit.limit == 30


def test_a_deadline_run_into_lowers_the_estimate_and_a_refused_photo_says_nothing():
    limit, clock = limit_with(target_s=30.0, smoothing=1.0)
    answer_batch(limit, clock, 1, 1.0)
    assert limit.limit == 30
    ticket = limit.try_admit()
    clock.now += 60.0  # the deadline
    limit.finished(ticket, out_of_time=True)
    assert limit.limit == 1 and limit.in_flight == 0
    ticket = limit.try_admit()
    clock.now += 0.001  # a 400 in a millisecond: not a sign of speed
    limit.finished(ticket)
    assert limit.limit == 1


def test_the_guard_rails_bound_the_limit():
    fast, clock = limit_with(target_s=30.0, max_limit=64, smoothing=1.0)
    answer_batch(fast, clock, 1, 0.05)
    answer_batch(fast, clock, 32, 0.05)  # a GPU: 640 per second
    assert fast.limit == 64
    slow, clock = limit_with(target_s=30.0, min_limit=2)
    answer_batch(slow, clock, 1, 600.0)
    assert slow.limit == 2
    with pytest.raises(ValueError, match="min_limit <= max_limit"):
        AdaptiveLimit(30.0, 5, 4, unmeasured_retry_after_s=2)


def test_retry_after_is_the_time_the_requests_in_flight_take_to_drain():
    limit, clock = limit_with(target_s=30.0)
    answer_batch(limit, clock, 1, 4.0)  # 0.25 per second: limit 7
    tickets = [limit.try_admit() for _ in range(limit.limit)]
    assert None not in tickets and limit.try_admit() is None
    assert limit.retry_after_s() == 28  # 7 requests at 0.25 per second
    for ticket in tickets:
        limit.finished(ticket)
    assert limit.retry_after_s() == 1  # nothing in flight: at once, but not 0


def test_a_batchs_unequal_waits_do_not_inflate_the_rate():
    """A pipeline that answers 4 requests every 8 s (0.5 per second) in batches: the request let in just
    before a batch ends waited 2 s, the first 8 s. The average of each request's n / W says 0.80 per second;
    the ratio of the averages says 0.5 with equal weights, a little more as they weigh the last answers
    most."""
    limit, clock = limit_with(target_s=30.0, min_limit=4)
    for _ in range(10):
        tickets = []
        for _ in range(4):
            tickets.append(limit.try_admit())
            clock.now += 2.0
        for ticket in tickets:
            limit.finished(ticket, answered=True)
    assert 0.5 <= limit.rate_per_s <= 0.7


def test_a_caller_holds_at_most_its_share_while_the_others_are_still_let_in():
    """A limit of 4 and a share of 0.5: one caller holds 2, whoever else asks; past the limit itself every
    caller is refused, with the overload's reason rather than the share's."""
    limit = AdaptiveLimit(30.0, 4, 4, unmeasured_retry_after_s=2, caller_share=0.5)
    assert limit.caller_limit == 2
    flooding = [limit.try_admit("alice") for _ in range(2)]
    assert None not in flooding
    assert limit.try_admit("alice") is None and limit.refused_by("alice") == "caller_share"
    assert limit.why_full("alice") == (
        "this caller's share is full: alice has 2 requests in flight, its share (0.5) of this API's limit of 4"
    )
    steady = limit.try_admit("bob")
    assert steady is not None and steady.caller == "bob" and not limit.caller_share_full("bob")
    assert limit.try_admit("carol") is not None  # the limit is full now: 4 in flight
    assert limit.try_admit("dave") is None and limit.refused_by("dave") == "api"
    assert limit.why_full("dave").startswith("this API serves 4 requests")
    assert limit.refused_by("alice") == "api"  # her share is full too, but the limit is what refuses now
    limit.finished(flooding[0])
    assert limit.in_flight_by_caller["alice"] == 1 and limit.try_admit("alice") is not None


def test_the_share_follows_the_limit_and_is_never_below_one_request():
    limit, clock = limit_with(target_s=30.0, caller_share=0.5)
    assert limit.limit == 1 and limit.caller_limit == 1  # floor(0.5) would lock every caller out
    answer_batch(limit, clock, 1, 3.0)  # 1/3 per second: a limit of 10
    assert limit.limit == 10 and limit.caller_limit == 5
    whole = AdaptiveLimit(30.0, 6, 6, unmeasured_retry_after_s=2, caller_share=1.0)
    assert whole.caller_limit == 6


def test_requests_without_a_caller_count_against_no_share():
    """Keys off: no request names a caller, and the limit alone applies."""
    limit = AdaptiveLimit(30.0, 3, 3, unmeasured_retry_after_s=2, caller_share=0.34)
    assert [limit.try_admit() is not None for _ in range(4)] == [True, True, True, False]
    assert not limit.caller_share_full(None) and not limit.in_flight_by_caller


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5])
def test_a_caller_share_outside_0_to_1_is_refused(share):
    with pytest.raises(ValueError, match="caller_share"):
        AdaptiveLimit(30.0, 1, 4, unmeasured_retry_after_s=2, caller_share=share)
