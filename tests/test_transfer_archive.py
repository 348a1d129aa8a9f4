"""``sessionstore export`` / ``import``: an exact round trip on every backend, plain and
gzipped, through a file and through stdin; a damaged, an altered and a truncated
archive refused with the line number and nothing written; an import that finds part of
the archive already in place goes on from there."""

from __future__ import annotations

import gzip
import io
import json
import re

import pytest
from support.namespace_data import contents, events, seed, url_of
from typer.testing import CliRunner

import sessionstore
from sessionstore import NamespaceNotEmptyError, SessionHeader
from sessionstore.cli import app
from sessionstore.transfer.archive import ArchiveError, export_archive, import_archive


@pytest.fixture(params=["file", "sqlite", "redis", "cluster"])
def url(request, tmp_path) -> str:
    return url_of(request.param, request, tmp_path)


def archive_of(url: str, namespace: str) -> bytes:
    out = io.BytesIO()
    export_archive(url, namespace, out)
    return out.getvalue()


def test_an_archive_round_trips_exactly_on_every_backend(url, namespace):
    seed(url, namespace)
    archive = archive_of(url, namespace)
    lines = [json.loads(line) for line in archive.splitlines()]
    assert lines[0] == {"format": "sessionstore-archive", "version": 1, "namespace": namespace}
    assert lines[-1]["type"] == "end" and lines[-1]["events"] == 13
    report = import_archive(url, namespace + "-back", io.BytesIO(gzip.compress(archive)))
    assert report.problems == [] and report.counts.events == 13
    assert contents(url, namespace + "-back") == contents(url, namespace)
    assert sessionstore.transfer.verify(url, url, namespace, to_namespace=namespace + "-back") == []


def damaged(archive: bytes, line: int, edit) -> bytes:  # noqa: ANN001
    lines = archive.splitlines(keepends=True)
    lines[line - 1] = edit(lines[line - 1])
    return b"".join(lines)


@pytest.mark.parametrize(
    ("edited", "edit", "line", "detail"),
    [
        (3, lambda text: text[:40] + b"\n", 3, "not JSON"),
        (3, lambda text: text.replace(b'"n":4', b'"n":5'), 14, "the archive was altered"),
        (3, lambda text: text.replace(b'"seq":4', b'"seq":9'), 3, "event seq 9 where 4 was due"),
        (2, lambda text: b'{"type":"mystery"}\n', 2, "an unknown record type"),
        (5, lambda text: text.replace(b'"events":1', b'"events":2'), 7, "1 events where 2"),
    ],
)
def test_a_damaged_archive_is_refused_with_its_line_and_nothing_is_written(
    tmp_path, namespace, edited, edit, line, detail
):
    url = (tmp_path / "store").as_uri()
    seed(url, namespace)
    archive = damaged(archive_of(url, namespace), edited, edit)
    refused_whole(url, namespace, archive, line, detail)


def refused_whole(url: str, namespace: str, archive: bytes, line: int, detail: str) -> None:
    """Importing ``archive`` raises ArchiveError naming ``line`` and writes nothing: the
    store holds the seeded namespace only, as it was."""
    with pytest.raises(ArchiveError, match=f"archive line {line}: .*{detail}") as refused:
        import_archive(url, "target", io.BytesIO(archive))
    assert refused.value.line == line
    assert sessionstore.namespaces(url) == [sessionstore.NamespaceUsage(namespace, 3, 3)]


def test_a_truncated_archive_is_refused_plain_or_gzipped(tmp_path, namespace):
    url = (tmp_path / "store").as_uri()
    seed(url, namespace)
    archive = archive_of(url, namespace)
    cut = b"".join(archive.splitlines(keepends=True)[:6])
    with pytest.raises(ArchiveError, match="archive line 7: .*truncated"):
        import_archive(url, "target", io.BytesIO(cut))
    zipped = gzip.compress(archive)
    with pytest.raises(ArchiveError, match="gzip stream is damaged"):
        import_archive(url, "target", io.BytesIO(zipped[: len(zipped) // 2]))
    assert [usage.name for usage in sessionstore.namespaces(url)] == [namespace]


def test_an_import_goes_on_from_what_is_in_place_and_refuses_other_data(tmp_path, namespace):
    url = (tmp_path / "store").as_uri()
    seed(url, namespace, log_events=2500)
    archive = archive_of(url, namespace)
    with sessionstore.connect(url, "target") as store:
        store.events.create(
            SessionHeader(id="agent-7", cwd="/srv/agent", created_at=1_718_000_000_000)
        )
        store.events.append("agent-7", events(1500))
    report = import_archive(url, "target", io.BytesIO(archive))
    assert report.problems == [] and report.counts.present == 1500
    assert contents(url, "target") == contents(url, namespace)
    with sessionstore.connect(url, "other") as store:
        store.session("X", "s", "e", "1h").set_data(1, 0)
    with pytest.raises(NamespaceNotEmptyError):
        import_archive(url, "other", io.BytesIO(archive))
    assert import_archive(url, "other", io.BytesIO(archive), merge=True).problems == []


def test_the_commands_export_to_stdout_and_import_from_stdin(tmp_path, namespace):
    url = (tmp_path / "store").as_uri()
    seed(url, namespace)
    runner = CliRunner()
    exported = runner.invoke(app, ["export", "--url", url, "-n", namespace, "--gzip"])
    assert exported.exit_code == 0, exported.stderr
    assert "exported 3 sessions (13 events) and 3 values" in exported.stderr
    imported = runner.invoke(
        app, ["import", "--url", url, "-n", "restored"], input=exported.stdout_bytes
    )
    assert imported.exit_code == 0, imported.stderr
    assert (
        imported.stdout == "imported 3 sessions (13 events written, 0 already there) and 3 values\n"
    )
    assert contents(url, "restored") == contents(url, namespace)
    (tmp_path / "bad.jsonl").write_bytes(b'{"format":"sessionstore-archive","version":2}\n')
    refused = runner.invoke(app, ["import", str(tmp_path / "bad.jsonl"), "--url", url, "-n", "x"])
    assert refused.exit_code == 2
    assert "archive line 1: format version 2; this reads 1" in refused.stderr


def test_export_json_needs_an_output_file_and_then_prints_the_end_record(tmp_path, namespace):
    url = (tmp_path / "store").as_uri()
    seed(url, namespace)
    runner = CliRunner()
    refused = runner.invoke(app, ["export", "--url", url, "-n", namespace, "--json"])
    assert refused.exit_code == 2 and "--json needs --output" in refused.stderr
    target = tmp_path / "backup.jsonl.gz"
    done = runner.invoke(
        app, ["export", "--url", url, "-n", namespace, "-o", str(target), "--json"]
    )
    assert done.exit_code == 0, done.stderr
    end = json.loads(done.stdout)
    assert (end["sessions"], end["events"], end["values"], end["live"]) == (3, 13, 3, [])
    lines = gzip.decompress(target.read_bytes()).splitlines()
    assert json.loads(lines[-1])["sha256"] == end["sha256"]


def test_flags_that_are_not_bools_and_text_streams_are_invalid_arguments(tmp_path, namespace):
    """``merge="no"`` is true in Python: taken as given it would skip the guard it asks
    for. Such a flag, and a text stream, are refused before anything is read or written."""
    source, other = (tmp_path / "a").as_uri(), (tmp_path / "b").as_uri()
    with sessionstore.connect(source, namespace) as store:
        store.session("A", "b", "c", "1h").set_data(1, 1)
    with sessionstore.connect(other, namespace) as store:
        store.session("X", "b", "c", "1h").set_data(2, 1)
    for flags in ({"merge": "no"}, {"verify": "no"}, {"merge": 0}):
        with pytest.raises(sessionstore.InvalidArgumentError, match="must be True or False"):
            sessionstore.copy(source, other, namespace, **flags)
    with pytest.raises(sessionstore.InvalidArgumentError, match="merge must be True or False"):
        sessionstore.transfer.verify(source, other, namespace, merge="no")
    with pytest.raises(sessionstore.InvalidArgumentError, match="out must be a binary stream"):
        export_archive(source, namespace, io.StringIO())
    archive = io.BytesIO()
    export_archive(source, namespace, archive)
    with pytest.raises(sessionstore.InvalidArgumentError, match="source must be a binary"):
        import_archive(other, namespace, io.StringIO(archive.getvalue().decode()), merge=True)
    with pytest.raises(sessionstore.InvalidArgumentError, match="merge must be True or False"):
        import_archive(other, namespace, io.BytesIO(archive.getvalue()), merge="yes")
    with sessionstore.connect(other, namespace) as store:
        assert [ref.symbol for ref in store.list_values()] == ["X"]


def test_a_value_expired_by_the_time_it_is_imported_is_left_out_and_reported(tmp_path, namespace):
    import time

    source, target = (tmp_path / "a").as_uri(), (tmp_path / "b").as_uri()
    with sessionstore.connect(source, namespace) as store:
        store.session("A", "b", "c", "1h", ttl=0.2).set_data(1, 1)
        store.session("K", "b", "c", "1h").set_data(2, 1)
    archive = io.BytesIO()
    export_archive(source, namespace, archive)
    time.sleep(0.3)
    report = import_archive(target, namespace, io.BytesIO(archive.getvalue()))
    assert report.counts.values == 1
    assert report.counts.expired_values == ["A/b/c/1h/backtest"]
    with sessionstore.connect(target, namespace) as store:
        assert [ref.symbol for ref in store.list_values()] == ["K"]
        assert store.session("A", "b", "c", "1h").get_data(5) is None


#: Data nested deeper than an append takes (a JSON parser takes it).
DEEP = b'{"x":' + b"[" * 300 + b"]" * 300 + b"}"


def resealed(archive: bytes) -> bytes:
    """``archive`` (edited) with its end record made to match it again (as an archive
    edited by hand with jq, its digest recomputed, would)."""
    import hashlib

    lines = archive.splitlines(keepends=True)
    body = lines[:-1]
    end = json.loads(lines[-1])
    end["sha256"] = hashlib.sha256(b"".join(body)).hexdigest()
    return b"".join(body) + json.dumps(end).encode() + b"\n"


@pytest.mark.parametrize(
    ("edited", "edit", "detail"),
    [
        (3, lambda text: text.replace(b'"data":{"turn":1}', b'"data":[1]', 1), "data"),
        (
            6,
            lambda text: text.replace(b'"data":{"turn":1}', b'"data":' + DEEP, 1),
            "not lossless JSON",
        ),
        (11, lambda text: text.replace(b'"mode":"backtest"', b'"mode":"paper"'), "mode"),
        (
            13,
            lambda text: re.sub(rb'"payload":"[^"]*"', b'"payload":"wcE="', text, count=1),
            "msgpack",
        ),
    ],
)
def test_an_archive_edited_with_its_digest_made_again_is_refused_whole(
    tmp_path, namespace, edited, edit, detail
):
    """The digest proves an archive unaltered, not sound: what a write would refuse is
    refused while the archive is read, naming the line, before anything is written."""
    url = (tmp_path / "store").as_uri()
    seed(url, namespace)
    archive = resealed(damaged(archive_of(url, namespace), edited, edit))
    refused_whole(url, namespace, archive, edited, detail)


def test_a_destination_that_cannot_make_appends_durable_is_refused_before_any_write(
    tmp_path, namespace
):
    import time

    import redis
    from support.redis_server import RedisServer

    source = (tmp_path / "store").as_uri()
    seed(source, namespace)
    archive = archive_of(source, namespace)
    values_only = (tmp_path / "values-only").as_uri()
    with sessionstore.connect(values_only, namespace) as store:
        store.session("A", "b", "c", "1h").set_data(1, 1)
        store.events.create(SessionHeader(id="lapsed"), ttl=0.1)
        store.events.append("lapsed", [{"seq": 0, "type": "note", "time": 1, "data": {}}])
    time.sleep(0.2)
    with RedisServer(durable=False) as server:
        with pytest.raises(sessionstore.DurabilityError):
            sessionstore.copy(source, server.url, namespace)
        with pytest.raises(sessionstore.DurabilityError):
            import_archive(server.url, namespace, io.BytesIO(archive))
        client = redis.Redis(port=server.port)
        try:
            assert client.dbsize() == 0
        finally:
            client.close()
        # Only values to write (the one session has expired): no append is made.
        copied = sessionstore.copy(values_only, server.url, namespace)
        assert (copied.counts.values, copied.counts.expired) == (1, ["lapsed"])
        imported = import_archive(
            server.url, namespace + "-2", io.BytesIO(archive_of(values_only, namespace))
        )
        assert (imported.counts.values, imported.counts.expired) == (1, ["lapsed"])


def test_a_harness_event_older_than_its_check_is_reported_not_refusing_the_archive(
    tmp_path, namespace
):
    """A log written before the harness fields were checked still loads: its archive
    imports the rest, and that session is reported as a copy reports it."""
    url = (tmp_path / "store").as_uri()
    seed(url, namespace)
    old = b'"type":"tool/call","time":1718000000000,"data":{"call_id":7}'
    archive = resealed(
        damaged(
            archive_of(url, namespace),
            6,
            lambda text: text.replace(
                b'"type":"turn/start","time":1718000000000,"data":{"turn":1}', old
            ),
        )
    )
    report = import_archive(url, "target", io.BytesIO(archive))
    assert report.counts.sessions == 2 and report.counts.values == 3
    [problem] = report.problems
    assert problem.startswith("session 'short-lived': HarnessFieldError")
