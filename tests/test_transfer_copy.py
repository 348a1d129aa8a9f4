"""``sessionstore.copy`` and ``sessionstore copy``: every pair of backends copied and
verified exactly; a copy killed mid-way and run again; a destination holding a prefix
of a log, another log, other data; a session with a live writer."""

from __future__ import annotations

import io
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from support.namespace_data import EXPIRING, HISTORY, PLAIN, contents, events, seed, url_of

import sessionstore
from sessionstore import NamespaceNotEmptyError, SessionEvent, SessionHeader
from sessionstore.cli import main

BACKENDS = ["file", "sqlite", "redis", "cluster"]


def expires_at(url: str, namespace: str) -> tuple[int | None, int | None]:
    with sessionstore.connect(url, namespace) as store:
        session = store.events.info("short-lived").expires_at
        value = store.session(*EXPIRING, mode="live").records().expires_at
    return session, value


@pytest.mark.parametrize(("source", "target"), list(itertools.permutations(BACKENDS, 2)))
def test_a_namespace_is_copied_exactly_between_every_pair_of_backends(
    source, target, request, tmp_path, namespace
):
    from_url = url_of(source, request, tmp_path, "from")
    to_url = url_of(target, request, tmp_path, "to")
    seed(from_url, namespace)
    report = sessionstore.copy(from_url, to_url, namespace, verify=True)
    assert report.ok, (report.problems, report.differences)
    assert (report.counts.sessions, report.counts.events, report.counts.values) == (3, 13, 3)
    assert contents(to_url, namespace) == contents(from_url, namespace)
    with sessionstore.connect(to_url, namespace) as store:
        child = store.events.info("agent-7b").header
        assert (child.parent_id, child.fork_seq, child.cwd) == ("agent-7", 3, "/srv/agent")
        assert [e.time for e in store.events.read_from("agent-7", 0)] == [e.time for e in events(7)]
        assert store.session(*HISTORY, history=True).records().versions[2].payload is None
        assert store.session(*PLAIN).get_data(1_718_000_000_000)["raw"] == b"\x00\xff"
    for copied, original in zip(
        expires_at(to_url, namespace), expires_at(from_url, namespace), strict=True
    ):
        assert copied is not None and original is not None
        assert abs(copied - original) < 5_000


def test_a_copy_through_sentinel_carries_everything(tmp_path, namespace):
    from support.redis_sentinel import SentinelSetup

    files, database = (tmp_path / "files").as_uri(), f"sqlite:///{tmp_path / 'copy.db'}"
    seed(files, namespace)
    with SentinelSetup() as setup:
        sentinel = setup.url
        there = sessionstore.copy(files, sentinel, namespace, verify=True)
        back = sessionstore.copy(sentinel, database, namespace, verify=True)
    assert there.ok and back.ok, (there, back)
    assert contents(database, namespace) == contents(files, namespace)


def test_a_copy_into_another_namespace_of_the_same_store_leaves_the_source_as_it_was(
    redis_server, namespace
):
    seed(redis_server.url, namespace)
    before = contents(redis_server.url, namespace)
    report = sessionstore.copy(
        redis_server.url, redis_server.url, namespace, to_namespace=namespace + "-b", verify=True
    )
    assert report.ok
    assert (
        contents(redis_server.url, namespace)
        == before
        == contents(redis_server.url, namespace + "-b")
    )


def test_a_copy_goes_on_from_the_destinations_next_seq_after_checking_what_is_there(
    tmp_path, namespace
):
    from_url, to_url = (tmp_path / "a").as_uri(), f"sqlite:///{tmp_path / 'b.db'}"
    seed(from_url, namespace, log_events=2500)
    with sessionstore.connect(to_url, namespace) as store:
        store.events.create(
            sessionstore.SessionHeader(id="agent-7", cwd="/srv/agent", created_at=1_718_000_000_000)
        )
        store.events.append("agent-7", events(1200))
    report = sessionstore.copy(from_url, to_url, namespace, verify=True)
    assert report.ok, report.problems
    assert report.counts.present == 1200
    assert report.counts.events == 2500 - 1200 + 5 + 1


def test_a_destination_log_that_differs_is_refused_and_left_as_it_was(tmp_path, namespace):
    from_url, to_url = (tmp_path / "a").as_uri(), (tmp_path / "b").as_uri()
    seed(from_url, namespace)
    changed = [SessionEvent(seq=0, type="turn/start", time=1, data={"turn": 9})]
    with sessionstore.connect(to_url, namespace) as store:
        store.events.create(
            SessionHeader(id="agent-7", cwd="/srv/agent", created_at=1_718_000_000_000)
        )
        store.events.append("agent-7", changed)
    report = sessionstore.copy(from_url, to_url, namespace, verify=True)
    assert report.problems == [
        "session 'agent-7': the destination's event 0 differs from the source's"
    ]
    assert any(line.startswith("session 'agent-7': ") for line in report.differences or [])
    with sessionstore.connect(to_url, namespace) as store:
        assert store.events.read_from("agent-7", 0) == changed


def test_a_destination_holding_other_data_is_refused_unless_merging(tmp_path, namespace):
    from_url, to_url = (tmp_path / "a").as_uri(), (tmp_path / "b").as_uri()
    seed(from_url, namespace)
    with sessionstore.connect(to_url, namespace) as store:
        store.session("OTHER", "s", "e", "1h").set_data(1, 0)
    with pytest.raises(NamespaceNotEmptyError, match="0 sessions and 1 values"):
        sessionstore.copy(from_url, to_url, namespace)
    assert sessionstore.copy(from_url, to_url, namespace, merge=True, verify=True).ok
    assert sessionstore.transfer.verify(from_url, to_url, namespace) == [
        "value 'OTHER/s/e/1h/backtest': only in the destination"
    ]
    assert sessionstore.transfer.verify(from_url, to_url, namespace, merge=True) == []


@pytest.mark.parametrize("merge", [False, True])
def test_a_destination_value_that_differs_is_refused_and_left_as_it_was(tmp_path, namespace, merge):
    """Under a key the source has too: another plain record, or a history version the
    source does not have, is reported and kept, never overwritten or mixed in."""
    from_url, to_url = (tmp_path / "a").as_uri(), (tmp_path / "b").as_uri()
    seed(from_url, namespace)
    with sessionstore.connect(to_url, namespace) as store:
        store.session(*PLAIN).set_data({"precious": "destination"}, 5)
        store.session(*HISTORY, history=True).put({"precious": "v2"}, 2)
        before = {key: store.session(*key).records() for key in (PLAIN, HISTORY)}
    report = sessionstore.copy(from_url, to_url, namespace, merge=merge)
    assert report.problems == [
        "value 'BTCUSDT/llm-momentum/binance/1h/backtest': the destination holds another "
        "plain record under this key; not written, left as it was",
        "value 'BTCUSDT/llm-signal/binance/1h/backtest': the destination's history under "
        "this key holds a version the source does not (at 2); not written, left as it was",
    ]
    with sessionstore.connect(to_url, namespace) as store:
        assert {key: store.session(*key).records() for key in (PLAIN, HISTORY)} == before


def test_a_copy_of_values_goes_on_over_what_an_earlier_run_wrote(tmp_path, namespace):
    """The records of the source's own value, in part (an interrupted run) or whole,
    are no conflict: the copy completes them."""
    from_url, to_url = (tmp_path / "a").as_uri(), (tmp_path / "b").as_uri()
    seed(from_url, namespace)
    with sessionstore.connect(from_url, namespace) as store:
        first = store.session(*HISTORY).records().versions[0]
    with sessionstore.connect(to_url, namespace) as store:
        store.session(*HISTORY, history=True).put(
            sessionstore.codec.load_value(first.payload or b"", "v"), first.when
        )
    assert sessionstore.copy(from_url, to_url, namespace, verify=True).ok
    assert sessionstore.copy(from_url, to_url, namespace, verify=True).ok
    assert contents(to_url, namespace) == contents(from_url, namespace)


def test_a_session_with_a_live_writer_is_copied_up_to_its_committed_events(tmp_path, namespace):
    from_url, to_url = (tmp_path / "a").as_uri(), f"sqlite:///{tmp_path / 'b.db'}"
    with (
        sessionstore.connect(from_url, namespace) as store,
        store.events.writer(SessionHeader(id="live")) as writer,
    ):
        for n in range(5):
            writer.emit("note", {"n": n})
        writer.flush()
        report = sessionstore.copy(from_url, to_url, namespace, verify=True)
        assert report.ok and report.counts.live == {"live": 5}
        writer.emit("note", {"n": 5})
        writer.flush()
        (difference,) = sessionstore.transfer.verify(from_url, to_url, namespace)
    assert difference == "session 'live': 6 records in the source, 5 in the destination"


def test_a_copy_killed_mid_way_and_run_again_loses_and_doubles_nothing(tmp_path, namespace):
    from_url, to_url = (tmp_path / "a").as_uri(), f"sqlite:///{tmp_path / 'b.db'}"
    with sessionstore.connect(from_url, namespace) as store:
        for n in range(12):
            store.events.create(SessionHeader(id=f"s-{n:02}", created_at=n))
            store.events.append(f"s-{n:02}", events(2500))
    command = [
        sys.executable,
        "-m",
        "sessionstore",
        "copy",
        "--from",
        from_url,
        "--to",
        to_url,
        "-n",
        namespace,
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    copying = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    with sessionstore.connect(to_url, namespace) as store:
        while len(store.events.list()) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    copying.send_signal(signal.SIGKILL)
    copying.wait()
    with sessionstore.connect(to_url, namespace) as store:
        copied = sum(info.next_seq for info in store.events.list_info())
    assert 0 < copied < 12 * 2500, "the copy was not killed mid-way"
    report = sessionstore.copy(from_url, to_url, namespace, verify=True)
    assert report.ok, (report.problems, report.differences)
    assert report.counts.present + report.counts.events == 12 * 2500
    assert report.counts.present == copied


def cli(*args: str) -> int:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    return int(exited.value.code or 0)


def test_the_copy_command_verifies_and_exits_1_on_a_difference(tmp_path, namespace, capsys):
    from_url, to_url = (tmp_path / "a").as_uri(), f"sqlite:///{tmp_path / 'b.db'}"
    seed(from_url, namespace)
    assert cli("copy", "--from", from_url, "--to", to_url, "-n", namespace, "--verify") == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "copied 3 sessions (13 events written, 0 already there) and 3 values",
        "verified: both sides hold the same",
    ]
    with sessionstore.connect(to_url, namespace) as store:
        store.events.append("agent-7", events(1, start=7))
    code = cli("copy", "--from", from_url, "--to", to_url, "-n", namespace, "--verify", "--json")
    assert code == 1
    result = json.loads(capsys.readouterr().out)
    assert result["problems"] == ["session 'agent-7': the destination holds 8 events, the source 7"]
    assert result["differences"] == [
        "session 'agent-7': 7 records in the source, 8 in the destination"
    ]


def test_an_expired_session_a_local_store_still_lists_is_left_out(tmp_path, namespace):
    from_url, to_url = (tmp_path / "a").as_uri(), f"sqlite:///{tmp_path / 'b.db'}"
    seed(from_url, namespace)
    with sessionstore.connect(from_url, namespace) as store:
        store.events.set_ttl("short-lived", 0.001)
        time.sleep(0.01)
        assert "short-lived" in {header.id for header in store.events.list()}
    report = sessionstore.copy(from_url, to_url, namespace, verify=True)
    assert report.ok, report.differences
    assert report.counts.expired == ["short-lived"] and report.counts.sessions == 2


def test_a_namespace_is_never_copied_onto_itself(tmp_path, namespace):
    url = (tmp_path / "a").as_uri()
    with pytest.raises(sessionstore.InvalidArgumentError, match="onto itself"):
        sessionstore.copy(url, url, namespace)


def test_the_least_privilege_user_copies_from_and_to_its_namespace(acl_url, tmp_path, namespace):
    files, database = (tmp_path / "files").as_uri(), f"sqlite:///{tmp_path / 'copy.db'}"
    seed(files, namespace)
    there = sessionstore.copy(files, acl_url, namespace, verify=True)
    back = sessionstore.copy(acl_url, database, namespace, verify=True)
    assert there.ok and back.ok, (there, back)
    assert contents(database, namespace) == contents(files, namespace)


def test_a_copy_again_takes_an_expiry_away_that_the_source_no_longer_has(tmp_path, namespace):
    from_url, to_url = (tmp_path / "a").as_uri(), f"sqlite:///{tmp_path / 'b.db'}"
    seed(from_url, namespace)
    assert sessionstore.copy(from_url, to_url, namespace).ok
    with sessionstore.connect(from_url, namespace) as store:
        store.session(*EXPIRING, mode="live").set_ttl(None)
        store.events.set_ttl("short-lived", None)
    assert sessionstore.copy(from_url, to_url, namespace, verify=True).ok
    assert expires_at(to_url, namespace) == (None, None)


def test_the_copy_command_shows_a_progress_bar_on_a_terminal(tmp_path, namespace, monkeypatch):
    from rich.console import Console

    from sessionstore.cli import transfer

    from_url, to_url = (tmp_path / "a").as_uri(), f"sqlite:///{tmp_path / 'b.db'}"
    seed(from_url, namespace)
    terminal = io.StringIO()
    monkeypatch.setattr(transfer, "errors", Console(file=terminal, force_terminal=True, width=80))
    assert cli("copy", "--from", from_url, "--to", to_url, "-n", namespace) == 0
    assert "copying" in terminal.getvalue()
    assert contents(to_url, namespace) == contents(from_url, namespace)


def test_damaged_sessions_and_values_are_reported_and_the_rest_is_copied(tmp_path, namespace):
    from_url, to_url = f"sqlite:///{tmp_path / 'a.db'}", (tmp_path / "b").as_uri()
    seed(from_url, namespace)
    conn = sqlite3.connect(tmp_path / "a.db")
    with conn:
        conn.execute(
            "UPDATE log_events SET data = 'not json' WHERE session_id = 'agent-7' AND seq = 2"
        )
        conn.execute("UPDATE kv_values SET payload = x'c1' WHERE strategy = 'llm-momentum'")
    conn.close()
    report = sessionstore.copy(from_url, to_url, namespace, verify=True)
    assert [problem.split(":")[0] for problem in report.problems] == [
        "session 'agent-7'",
        "value 'BTCUSDT/llm-momentum/binance/1h/backtest'",
    ]
    assert "damaged in the source" in report.problems[0]
    with sessionstore.connect(to_url, namespace) as store:
        assert store.events.info("agent-7b").next_seq == 5
        assert store.session(*HISTORY, history=True).get_data(1_718_000_000_000) == {
            "signal": "buy"
        }
    assert any("damaged in the source" in line for line in report.differences or [])
    with pytest.raises(sessionstore.CorruptLogError):
        sessionstore.transfer.export_archive(from_url, namespace, io.BytesIO())


def test_a_value_problem_names_its_key_as_labels_do(tmp_path, namespace):
    """Two keys that differ only in where a ``/`` falls are told apart in the report."""
    from_url, to_url = (tmp_path / "a").as_uri(), (tmp_path / "b").as_uri()
    parts = [("a/b", "c", "e", "1h"), ("a", "b/c", "e", "1h")]
    with sessionstore.connect(from_url, namespace) as store:
        for key in parts:
            store.session(*key).set_data("source", 1)
    with sessionstore.connect(to_url, namespace) as store:
        for key in parts:
            store.session(*key).set_data("destination", 2)
    report = sessionstore.copy(from_url, to_url, namespace)
    assert sorted(problem.split(":")[0] for problem in report.problems) == [
        "value '\"a/b\"/c/e/1h/backtest'",
        "value 'a/\"b/c\"/e/1h/backtest'",
    ]
