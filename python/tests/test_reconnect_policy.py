"""ReconnectPolicy: delays double up to the cap, with a random share taken off so clients cut at once spread out."""

from __future__ import annotations

import random

from sandboxd import ReconnectPolicy


def test_delays_double_up_to_the_cap_and_are_jittered() -> None:
    policy = ReconnectPolicy(backoff_base=0.5, backoff_max=10.0, jitter=0.5)
    rng = random.Random(7)
    for attempt in range(1, 10):
        full = min(10.0, 0.5 * 2 ** (attempt - 1))
        delays = [policy.delay(attempt, rng) for _ in range(200)]
        assert all(full / 2 <= delay <= full for delay in delays)
        # Spread over the whole range, not one value: two clients cut together come back apart.
        assert max(delays) - min(delays) > full * 0.4


def test_no_jitter_is_the_plain_exponential_backoff() -> None:
    policy = ReconnectPolicy(backoff_base=0.5, backoff_max=10.0, jitter=0.0)
    assert [policy.delay(attempt) for attempt in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
