"""A value key's label, the name messages give it, tells every two keys apart."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import sessionstore
from sessionstore import NotSerializableError
from sessionstore.keys import ValueKey

PART = st.text(alphabet=st.sampled_from('ab/"\\ '), max_size=4)
PARTS = st.tuples(PART, PART, PART, PART)


@given(PARTS, PARTS)
def test_two_keys_never_share_a_label(first, second):
    a, b = ValueKey("ns", *first, "backtest"), ValueKey("ns", *second, "backtest")
    assert (a.label() == b.label()) == (a == b)


def test_a_plain_part_reads_as_it_is_and_an_odd_one_quoted():
    plain = ValueKey("ns", "BTCUSDT", "s", "x", "1h", "backtest")
    assert plain.label() == "BTCUSDT/s/x/1h/backtest"
    assert plain._replace(symbol="a/b", strategy="").label() == '"a/b"/""/x/1h/backtest'


def test_an_error_names_the_key_a_slash_would_have_made_ambiguous():
    with sessionstore.connect("memory://", "labels") as store:
        messages = set()
        for parts in (("a/b", "c", "d", "e"), ("a", "b/c", "d", "e")):
            try:
                store.session(*parts).set_data({1, 2}, 1)
            except NotSerializableError as exc:
                messages.add(str(exc))
        assert len(messages) == 2
