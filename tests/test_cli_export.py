"""``sessionstore export`` writes nothing, and creates no file, until the store has
answered, and a file it cannot write is one line naming it."""

from __future__ import annotations

import io
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

import sessionstore
from sessionstore import transfer
from sessionstore.cli import app

T = 1_718_000_000_000


def export(*args: str):  # noqa: ANN201
    return CliRunner().invoke(app, ["export", *args])


def seeded(url: str, namespace: str) -> str:
    with sessionstore.connect(url, namespace) as store:
        store.session("BTC", "s", "x", "1h").set_data("v", T)
    return url


def with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    return parts._replace(
        netloc=f"{parts.username}:{password}@{parts.hostname}:{parts.port}"
    ).geturl()


def test_an_output_file_in_a_missing_folder_is_one_line_naming_it(tmp_path):
    url = seeded((tmp_path / "store").as_uri(), "default")
    target = tmp_path / "missing" / "x.jsonl"
    result = export("--url", url, "-o", str(target))
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: invalid argument (")
    assert line.endswith(f"): cannot write {target}: No such file or directory")
    assert not target.parent.exists()


def test_an_output_that_is_a_folder_is_one_line_naming_it(tmp_path):
    url = seeded((tmp_path / "store").as_uri(), "default")
    result = export("--url", url, "-o", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.endswith(f"): cannot write {tmp_path}: Is a directory\n")


def test_an_export_the_server_refuses_writes_nothing_to_stdout(acl_url, namespace):
    seeded(acl_url, namespace)
    result = export("--url", with_password(acl_url, "wrong"), "-n", namespace)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: access denied (")
    assert result.stdout_bytes == b""


def test_an_export_the_server_refuses_leaves_the_output_file_as_it_was(
    acl_url, namespace, tmp_path
):
    seeded(acl_url, namespace)
    wrong = with_password(acl_url, "wrong")
    kept, absent = tmp_path / "kept.jsonl", tmp_path / "absent.jsonl.gz"
    kept.write_bytes(b"an older archive\n")
    for target in (kept, absent):
        result = export("--url", wrong, "-n", namespace, "-o", str(target), "--json")
        assert result.exit_code == 2 and result.stdout == ""
        assert result.stderr.startswith("error: access denied (")
    assert kept.read_bytes() == b"an older archive\n"
    assert not absent.exists()


def test_an_empty_namespace_exports_its_format_line_and_end_line(tmp_path):
    url = seeded((tmp_path / "store").as_uri(), "default")
    result = export("--url", url, "-n", "empty")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout_bytes.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(b'{"format":"sessionstore-archive"')
    assert lines[1].startswith(b'{"type":"end","sessions":0,"events":0,"values":0,')


def test_a_source_that_does_not_exist_is_not_found_and_nothing_is_created(tmp_path, monkeypatch):
    """What only reads a store (an export, a copy's source) creates none: a mistyped path
    is an error naming the absolute path, and no file or folder appears."""
    monkeypatch.chdir(tmp_path)
    for url in ("sqlite:///typo/prod.db", "./typo-folder", (tmp_path / "gone").as_uri()):
        for args in (
            ["export", "--url", url, "-o", str(tmp_path / "out.jsonl")],
            ["copy", "--from", url, "--to", str(tmp_path / "dest")],
        ):
            result = CliRunner().invoke(app, args)
            assert result.exit_code == 2, (args, result.output)
            assert result.stderr.startswith("error: not found"), result.stderr
            assert "there is no store at " + str(tmp_path) in result.stderr
        with pytest.raises(sessionstore.StoreNotFoundError, match="there is no store at /"):
            sessionstore.copy(url, tmp_path / "dest", "default")
        with pytest.raises(sessionstore.StoreNotFoundError):
            transfer.verify(url, tmp_path / "dest", "default")
        with pytest.raises(sessionstore.StoreNotFoundError):
            transfer.export_archive(url, "default", io.BytesIO())
    assert sorted(path.name for path in tmp_path.iterdir()) == []
