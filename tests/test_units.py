"""Pure pieces: key layout, time normalisation, lossless JSON, closers, URL handling."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionstore import InvalidArgumentError, NotJSONSerializableError, keys
from sessionstore.connection import mask_url, resolve_url
from sessionstore.eventlog import closers, encode_batch, event_text
from sessionstore.jsondata import JSONLossError, dump_lossless
from sessionstore.models import SessionEvent
from sessionstore.when import to_epoch_ms

NS = "run-42"


def vkey(*parts: str, namespace: str = NS) -> keys.ValueKey:
    return keys.ValueKey(namespace, *parts)


def test_value_keys_are_readable_and_start_with_the_namespace_prefix():
    name = keys.value_key(vkey("BTCUSDT", "llm-momentum", "binance", "1h", "backtest"))
    assert name == "ss:run-42:val:{BTCUSDT:llm-momentum:binance:1h:backtest}"
    assert name.startswith(keys.namespace_prefix(NS))


def test_all_keys_of_one_log_session_share_one_hash_tag():
    meta, stream = keys.log_keys(NS, "s-1")
    assert meta == "ss:run-42:log:{s-1}:meta" and stream == "ss:run-42:log:{s-1}:events"


@given(st.text(), st.text())
def test_escaped_parts_round_trip_and_never_open_a_second_tag(a, b):
    name = keys.value_key(vkey(a, b, "x", "y", "live"))
    assert name.count("{") == 1 and name.count("}") == 1
    assert keys.parse_value_key(name, NS) == vkey(a, b, "x", "y", "live")


@given(st.text(min_size=1), st.text(min_size=1))
def test_the_index_members_of_stored_key_names_are_parsed_back(session_id, symbol):
    """What the index audit reads from a SCAN: a session's meta hash and a value's key
    (plain or history) give the members the writes put in the index."""
    meta, _ = keys.log_keys(NS, session_id)
    assert keys.member_of_meta_key(meta, NS) == keys.session_member(session_id)
    key = vkey(symbol, "s", "e", "1h", "backtest")
    plain, history = keys.value_key(key), keys.history_keys(key)[0]
    assert keys.member_of_value_name(plain, NS) == keys.value_member(key, False)
    assert keys.member_of_value_name(history, NS) == keys.value_member(key, True)
    assert keys.member_of_meta_key(meta, NS + "x") is None
    assert keys.member_of_meta_key(plain, NS) is None
    assert keys.member_of_value_name(plain, NS + "x") is None


@given(st.text(min_size=1), st.text(min_size=1))
def test_a_namespace_prefix_never_matches_another_namespace(a, b):
    if a != b:
        assert not keys.namespace_prefix(b).startswith(keys.namespace_prefix(a))


def test_glob_characters_are_escaped_in_namespaces():
    assert keys.namespace_pattern("a*") == "ss:a%2A:*"


@pytest.mark.parametrize(
    ("when", "ms"),
    [
        (0, 0),
        (1_718_000_000_123, 1_718_000_000_123),
        (datetime(1970, 1, 1, tzinfo=UTC), 0),
        (datetime(2024, 6, 10, 6, 13, 20, 999_999), 1_717_999_999_999 + 1_000 * 0 + 1),
    ],
)
def test_when_normalises_to_epoch_ms(when, ms):
    if isinstance(when, datetime) and when.tzinfo is None:
        ms = int(when.replace(tzinfo=UTC).timestamp() * 1000)
    assert to_epoch_ms(when) == ms


@pytest.mark.parametrize("bad", [True, "1", 1.0, float("nan"), None, 2**60])
def test_when_rejects_everything_else(bad):
    with pytest.raises(InvalidArgumentError):
        to_epoch_ms(bad)


def test_lossless_json_keeps_key_order_and_compact_form():
    assert dump_lossless({"b": 1, "a": [1.5, None, True, "x"]}) == '{"b":1,"a":[1.5,null,true,"x"]}'


@pytest.mark.parametrize(
    ("data", "path"),
    [({"a": [1, {"b": float("nan")}]}, "$.a[1].b"), ({"odd key": {1}}, "$['odd key']")],
)
def test_lossless_json_names_the_path(data, path):
    with pytest.raises(JSONLossError) as caught:
        dump_lossless(data)
    assert caught.value.path == path


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), json_values, max_size=5))
def test_lossless_json_round_trips_whatever_it_accepts(data):
    import orjson

    assert orjson.loads(dump_lossless(data)) == data


@given(st.lists(st.dictionaries(st.text(), json_values, max_size=5), min_size=2, max_size=5))
def test_a_batch_is_checked_at_once_with_the_same_texts(items):
    batch = encode_batch(
        "s", [SessionEvent(seq=s, type="t", time=1, data=d) for s, d in enumerate(items)]
    )
    assert batch.texts == [event_text(event) for event in batch.events]
    assert [orjson.loads(text)["data"] for text in batch.texts] == [
        orjson.loads(dump_lossless(item)) for item in items
    ]


@given(
    seq=st.integers(0, 2**63 - 1),
    kind=st.text(),
    time=st.integers(-(2**63) + 1, 2**63 - 1),
    data=st.dictionaries(st.text(), json_values, max_size=5),
    event_id=st.none() | st.text(),
)
def test_an_event_text_is_orjsons_dump_of_the_event_record(seq, kind, time, data, event_id):
    event = SessionEvent(seq=seq, type=kind, time=time, data=data, id=event_id)
    record = {"seq": seq, "type": kind, "time": time, "data": data}
    if event_id is not None:
        record["id"] = event_id
    try:
        expected = orjson.dumps(record)
    except orjson.JSONEncodeError:  # a lone surrogate: append refuses such text first
        return
    assert event_text(event) == expected
    if kind.isascii() and (event_id is None or event_id.isascii()):
        assert encode_batch("s", [event]).texts == [expected]


@pytest.mark.parametrize("bad", [(1, 2), float("inf"), {1, 2}, b"x"])
def test_one_lossy_item_sends_the_batch_to_the_item_by_item_check(bad):
    batch = [
        SessionEvent(seq=s, type="note", time=1, data={"v": bad if s == 6 else s})
        for s in (5, 6, 7)
    ]
    with pytest.raises(NotJSONSerializableError) as caught:
        encode_batch("s", batch)
    assert (caught.value.seq, caught.value.path) == (6, "$.v")


class _Str(str):
    pass


class _Dict(dict):
    pass


#: Leaves JSON keeps and leaves it does not (or keeps as another type).
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(
        [(1, 2), {1, 2}, b"x", _Str("s"), _Dict(a=1), datetime(2024, 1, 1, tzinfo=UTC), 2**64]
    ),
)
_DATA = st.dictionaries(
    st.text(max_size=4),
    st.recursive(
        _LEAVES,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=8,
    ),
    max_size=4,
)


@given(st.lists(_DATA, min_size=2, max_size=6))
def test_a_batch_is_refused_exactly_when_the_data_of_one_of_its_events_is(datas):
    """The one parse of a whole batch gives the verdict of checking each event's data
    on its own (:func:`dump_lossless`), and names the first event that fails it."""
    batch = [SessionEvent(seq=s, type="note", time=1, data=d) for s, d in enumerate(datas)]
    verdicts = []
    for data in datas:
        try:
            dump_lossless(data)
            verdicts.append(None)
        except JSONLossError as exc:
            verdicts.append(exc.path)
    refused = [(seq, path) for seq, path in enumerate(verdicts) if path is not None]
    if refused:
        with pytest.raises(NotJSONSerializableError) as caught:
            encode_batch("s", batch)
        assert (caught.value.seq, caught.value.path) == refused[0]
    else:
        texts = encode_batch("s", batch).texts
        assert texts == [event_text(event) for event in batch]


def event(seq, type, **data):
    return SessionEvent(seq=seq, type=type, time=100 + seq, data=data)


def test_no_closers_for_a_balanced_log_or_one_without_turns():
    assert closers([]) == []
    assert closers([event(0, "note")]) == []
    assert closers([event(0, "turn/start", turn=1), event(1, "turn/end", turn=1)]) == []


def test_closers_continue_seq_and_reuse_the_last_time():
    out = closers([event(0, "turn/start", turn=1), event(1, "step/start", turn=1, step=2)])
    assert [(e.seq, e.type, e.time) for e in out] == [(2, "step/end", 101), (3, "turn/end", 101)]


def test_only_the_final_turn_is_closed():
    log = [
        event(0, "turn/start", turn=1),
        event(1, "tool/call", turn=1, step=1, call_id="old", name="x", arguments={}),
        event(2, "turn/end", turn=1, reason={"kind": "done"}),
        event(3, "turn/start", turn=2),
    ]
    assert [e.type for e in closers(log)] == ["turn/end"]


def test_mask_url_hides_the_password():
    assert mask_url("redis://user:s3cret@host:6379/0") == "redis://user:***@host:6379/0"
    assert "s3cret" not in mask_url("rediss://:s3cret@host/0")
    assert mask_url("redis://host:6379/0") == "redis://host:6379/0"


def test_resolve_url_prefers_the_argument_then_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SESSIONSTORE_URL", "memory://")
    assert resolve_url("dummy://") == "dummy://"
    assert resolve_url(None) == "memory://"
    monkeypatch.delenv("SESSIONSTORE_URL")
    monkeypatch.chdir(tmp_path)
    assert resolve_url(None) == (tmp_path / ".sessionstore").as_uri()


def test_unknown_schemes_are_refused():
    import sessionstore

    with pytest.raises(InvalidArgumentError, match="unknown URL scheme"):
        sessionstore.connect("mongodb://x")


def test_a_new_event_takes_a_string_type():
    from sessionstore.eventlog import new_event

    assert new_event(3, "note", 7, None) == SessionEvent(seq=3, type="note", time=7, data={})
    for bad in (5, None, b"note"):
        with pytest.raises(InvalidArgumentError, match="type"):
            new_event(0, bad, 7, {})


def test_long_paths_and_values_are_elided_in_the_middle():
    from sessionstore.jsondata import elide, format_path, short_repr

    assert elide("short") == "short"
    long = "a" * 60 + "b" * 1000 + "c" * 60
    assert elide(long) == "a" * 60 + "..." + "c" * 60
    path = format_path(["k" * 10_000, *range(5000), "end"])
    assert len(path) < 300 and path.startswith("$['kkk") and path.endswith("[4999].end")
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert len(short_repr(deep)) < 130 and len(short_repr("x" * 10**6)) < 130


@pytest.mark.parametrize("bad", ["5", True, 5.0])
def test_models_are_strict_when_built_directly(bad):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        SessionEvent(seq=bad, type="x", time=1)
    with pytest.raises(ValidationError):
        SessionEvent(seq=1, type="x", time=bad)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("unknown command 'CONFIG', with args beginning with: ", True),
        ("ERR unknown command 'CONFIG'", True),
        ("Command # 1 (CONFIG GET appendonly) of pipeline caused error: unknown command", True),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", False),
        ("NOSCRIPT No matching script", False),
    ],
)
def test_a_refusal_is_recognised_wherever_its_words_stand(reply, expected):
    from redis.exceptions import NoPermissionError, ResponseError

    from sessionstore.redis.replies import refused

    assert refused(ResponseError(reply)) is expected
    assert refused(NoPermissionError("this user has no permissions to run the command"))
