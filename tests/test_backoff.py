"""The one back-off of the package, and the schedules its callers use."""

from __future__ import annotations

import random

import pytest
from redis.backoff import ExponentialBackoff

from sessionstore.backoff import LOST_RACE, Backoff
from sessionstore.redis import compat, pools, retry


def test_a_delay_doubles_per_failure_up_to_the_cap():
    backoff = Backoff(base=0.1, cap=1.0)
    assert [backoff.delay(n) for n in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


@pytest.mark.parametrize("failures", [0, 1, 5, 20, 200])
def test_a_jittered_delay_is_drawn_between_zero_and_the_unjittered_one(failures):
    plain, jittered = Backoff(0.001, 0.05), Backoff(0.001, 0.05, jitter=True)
    rng_state = random.getstate()
    try:
        random.seed(failures)
        draws = [jittered.delay(failures) for _ in range(200)]
    finally:
        random.setstate(rng_state)
    assert all(0 <= draw <= plain.delay(failures) for draw in draws)
    assert len(set(draws)) > 1


def test_a_lost_race_waits_at_most_20_ms_growing_from_half_a_ms():
    assert LOST_RACE.jitter
    assert Backoff(LOST_RACE.base, LOST_RACE.cap).delay(1) == 0.001
    assert max(LOST_RACE.delay(n) for n in range(100)) <= 0.02


def test_redis_calls_are_resent_on_the_schedule_of_the_drivers_own_retry():
    driver = ExponentialBackoff(cap=0.5, base=0.05)
    assert [retry.retry_delay(n) for n in range(8)] == [driver.compute(n) for n in range(8)]
    for flavour in (pools.BLOCKING, pools.ASYNCIO):
        given = pools.retry_of(flavour)._backoff
        assert isinstance(given, retry.DriverBackoff)
        assert [given.compute(n) for n in range(8)] == [retry.retry_delay(n) for n in range(8)]
    # The cluster client's resends past redis-py's defect (redis.compat) wait alike.
    assert compat.retry_delay is retry.retry_delay
    assert pools.RETRIES == retry.RETRIES == 2
