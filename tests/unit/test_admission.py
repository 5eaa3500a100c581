"""The adaptive in-flight limit: Little's law on each answer, the deadline's share as the latency target,
the configured bounds as guard rails, Retry-After from the drain time. A clock the test moves: no sleeps."""

import pytest

from food11_api.admission import AdaptiveLimit


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def limit_with(target_s=30.0, min_limit=1, max_limit=64, smoothing=0.25):
    clock = Clock()
    return AdaptiveLimit(target_s, min_limit, max_limit, smoothing=smoothing, clock=clock), clock


def answer_batch(limit: AdaptiveLimit, clock: Clock, count: int, seconds: float) -> None:
    """``count`` requests admitted together and answered ``seconds`` later."""
    admitted = [limit.try_admit() for _ in range(count)]
    assert None not in admitted
    clock.now += seconds
    for ticket in admitted:
        limit.finished(ticket, answered=True)


def test_before_any_answer_the_limit_is_the_minimum_and_retry_after_the_fallback():
    limit, _ = limit_with(min_limit=2)
    assert limit.limit == 2 and limit.rate_per_s is None
    assert limit.try_admit() and limit.try_admit()
    assert limit.try_admit() is None  # refused at once past it
    assert limit.retry_after_s(unmeasured=7) == 7


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
        answer_batch(limit, clock, limit.limit, limit.limit * 9.0)  # at the limit, three times slower
    assert limit.limit == 3
    for _ in range(12):
        answer_batch(limit, clock, limit.limit, limit.limit * 1.0)  # at the limit, 1 per second
    assert limit.rate_per_s == pytest.approx(1.0, rel=1e-3)
    assert limit.limit in (29, 30)  # the average comes from below


def test_answers_below_the_limit_raise_the_estimate_but_never_lower_it():
    """Below the limit n / W is the arrival rate: a quiet spell must not shrink the limit a burst meets."""
    limit, clock = limit_with(target_s=30.0, smoothing=1.0)
    answer_batch(limit, clock, 1, 1.0)  # 1 per second: limit 30
    for _ in range(5):
        answer_batch(limit, clock, 1, 2.0)  # one at a time, slower: the pipeline was not full
    assert limit.limit == 30
    answer_batch(limit, clock, 2, 1.0)  # two at once in 1 s: at least 2 per second
    assert limit.limit == 60


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
        AdaptiveLimit(30.0, 5, 4)


def test_retry_after_is_the_time_the_requests_in_flight_take_to_drain():
    limit, clock = limit_with(target_s=30.0)
    answer_batch(limit, clock, 1, 4.0)  # 0.25 per second: limit 7
    tickets = [limit.try_admit() for _ in range(limit.limit)]
    assert None not in tickets and limit.try_admit() is None
    assert limit.retry_after_s(unmeasured=2) == 28  # 7 requests at 0.25 per second
    for ticket in tickets:
        limit.finished(ticket)
    assert limit.retry_after_s(unmeasured=2) == 1  # nothing in flight: at once, but not 0
