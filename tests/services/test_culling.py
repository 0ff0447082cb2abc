"""The idle-culling policy (``labserver.services.provisioning.culling.select_idle``): a pure function of the clock.
The culler acting on a backend is tested in ``tests/services/test_lifecycle.py`` (the housekeeping
round on a recording local backend) and ``tests/backends/docker/test_warmpool.py`` (real containers)."""

from __future__ import annotations

import datetime as dt

from labserver.services.provisioning.culling import IdlePolicy, select_idle

T0 = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)


def test_idle_policy_is_a_pure_function_of_the_clock() -> None:
    policy = IdlePolicy(idle_minutes=30, grace_minutes=5)
    activity = {"a": T0, "b": T0 + dt.timedelta(minutes=20), "c": T0}
    assert select_idle(activity, T0 + dt.timedelta(minutes=29), policy) == []
    assert select_idle(activity, T0 + dt.timedelta(minutes=30), policy) == ["a", "c"]
    assert select_idle(activity, T0 + dt.timedelta(minutes=30), policy, keep=["c"]) == ["a"]
    assert select_idle(activity, T0 + dt.timedelta(minutes=60), policy) == ["a", "b", "c"]
    young = {"a": T0 + dt.timedelta(minutes=58)}
    assert select_idle(activity, T0 + dt.timedelta(minutes=60), policy, created=young) == ["b", "c"]
    assert select_idle(activity, T0 + dt.timedelta(days=9), IdlePolicy(idle_minutes=0)) == []
