"""``sessionstore.namespaces()`` counts what the namespace's own listings list, on every
backend that has namespaces to find."""

from __future__ import annotations

import uuid

import pytest

import sessionstore

T0 = 1_718_000_000_000


@pytest.fixture(params=["file", "sqlite", "redis"])
def any_store(request, tmp_path) -> str:  # noqa: ANN001
    if request.param == "file":
        return str(tmp_path / "store")
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("redis_server").url + "?durability=none"


def test_a_key_holding_a_plain_record_and_a_history_counts_as_its_two_values(any_store):
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    with sessionstore.connect(any_store, namespace) as store:
        store.session("MIX", "s", "e", "1h").set_data({"plain": 1}, T0)
        store.session("MIX", "s", "e", "1h", history=True).set_data({"v": 1}, T0 + 1)
        store.session("HIST", "s", "e", "1h", history=True).set_data({"v": 2}, T0)
        listed = store.list_values()
    found = {usage.name: usage for usage in sessionstore.namespaces(any_store)}
    assert len(listed) == 3
    assert (found[namespace].sessions, found[namespace].values) == (0, 3)
