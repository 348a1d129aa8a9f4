"""What the CLI prints for an operator to paste or act on works as printed (in-process,
through typer's runner)."""

from __future__ import annotations

import json
import shlex
import time
import uuid
from urllib.parse import urlsplit

import pytest
import redis
from test_cli_json import ALL
from typer.testing import CliRunner

import sessionstore
from sessionstore import SessionEvent, SessionHeader
from sessionstore.cli.app import app
from sessionstore.cli.demo import sessions_command

runner = CliRunner()


def run(*args: str, url_from_env: str | None = None):  # noqa: ANN201
    """Run the command; ``$SESSIONSTORE_URL`` is ``url_from_env`` (unset: None), never
    the test run's own."""
    env = {"SESSIONSTORE_URL": url_from_env}
    return runner.invoke(app, list(args), catch_exceptions=False, env=env)


def test_acl_without_a_password_generates_one_and_the_line_creates_a_working_user(
    redis_server,
):
    first, second = run("acl", "gen-user", "-n", "t-gen"), run("acl", "gen-user", "-n", "t-gen")
    assert first.exit_code == 0 and "shown only here" in first.stderr
    words = shlex.split(first.stdout)
    (secret,) = [word[1:] for word in words if word.startswith(">")]
    assert len(secret) >= 40 and "<" not in secret
    assert secret not in second.stdout  # a new one each time
    admin = redis.Redis(port=redis_server.port)
    try:
        admin.execute_command(*words[1:])
        user = redis.Redis(port=redis_server.port, username="gen-user", password=secret)
        assert user.ping()
        user.close()
    finally:
        admin.execute_command("ACL", "DELUSER", "gen-user")
        admin.close()


def test_acl_with_a_password_uses_it_and_says_nothing_else():
    result = run("acl", "u", "--password", "given-secret", "--json")
    assert result.exit_code == 0 and result.stderr == ""
    assert '"generated_password": false' in result.stdout and ">given-secret" in result.stdout


def test_acl_takes_its_url_from_the_environment_as_every_subcommand_does(redis_server):
    user = f"u-{uuid.uuid4().hex[:8]}"
    server = urlsplit(redis_server.url)
    args = ("acl", user, "--password", "pw", "-n", "t-env")
    printed = run(*args, url_from_env=redis_server.url)
    assert printed.exit_code == 0, printed.stderr
    assert printed.stdout.startswith(
        f"redis-cli -h {server.hostname} -p {server.port} ACL SETUSER {user} "
    )
    applied = run(*args, "--apply", "--json", url_from_env=redis_server.url)
    admin = redis.Redis(host=server.hostname, port=server.port)
    try:
        assert applied.exit_code == 0, applied.stderr
        assert json.loads(applied.stdout)["applied"] == [f"{server.hostname}:{server.port}"]
        assert admin.acl_getuser(user) is not None
    finally:
        admin.acl_deluser(user)
        admin.close()


def test_acl_apply_without_any_url_names_both_ways_to_give_one():
    result = run("acl", "u", "--apply")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: invalid argument: --apply needs --url (or $SESSIONSTORE_URL): an admin's URL "
        "of the deployment\n"
    )


def test_the_printed_sessions_command_never_holds_a_masked_password():
    secret_url = "redis://user:hunter2@db:6379/0"
    command = sessions_command(secret_url, "run-1")
    assert "hunter2" not in command and "***" not in command
    assert '--url "$SESSIONSTORE_URL"' in command
    plain_url = "redis://db:6379/0"
    assert shlex.split(sessions_command(plain_url, "run-1"))[-2:] == ["--url", plain_url]
    assert sessions_command(None, "run-1") == "sessionstore sessions list -n run-1"


def test_the_least_privilege_user_is_told_durability_aof_and_nothing_else(acl_url):
    plain_url = acl_url.replace("?durability=aof", "")
    result = run("sessions", "delete", "nothing-here", "--url", plain_url, "-n", "t-hint")
    assert result.exit_code == 2
    error, hint = result.stderr.splitlines()
    assert error.startswith("error: DurabilityError") and "durability='aof'" in error
    assert "?durability=aof" in hint and "durability=none" not in hint
    assert "make the server durable" not in hint
    assert urlsplit(acl_url).password not in result.stderr


@pytest.mark.parametrize("width", [60, 80, 120])
def test_help_wraps_to_the_terminal_and_labels_no_flag_with_a_type(width, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    paths = ALL
    assert ("sessions", "list") in paths and ("acl",) in paths
    for path in [(), *paths]:
        result = runner.invoke(app, [*path, "--help"], terminal_width=width)
        assert result.exit_code == 0, path
        lines = result.stdout.splitlines()
        assert max(len(line) for line in lines) <= width, (path, lines)
        assert "<bool>" not in result.stdout, path


def fill(url: str, namespace: str, sessions: int, values: int) -> None:
    with sessionstore.connect(url, namespace) as store:
        for n in range(sessions):
            store.events.create(SessionHeader(id=f"s{n}"))
            store.events.append(f"s{n}", [SessionEvent(seq=0, type="note", time=1)])
        for n in range(values):
            store.session(f"SYM{n}", "s", "e", "1h").set_data(n, 1)


@pytest.fixture(params=["file", "sqlite", "redis"])
def any_store(request, tmp_path) -> str:  # noqa: ANN001
    if request.param == "file":
        return str(tmp_path / "store")
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("redis_server").url + "?durability=none"


def test_namespaces_counts_a_key_holding_a_plain_record_and_a_history_as_two_values(
    any_store,
):
    """As the namespace's own listing lists them, on every backend."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    with sessionstore.connect(any_store, namespace) as store:
        store.session("MIX", "s", "e", "1h").set_data({"plain": 1}, 1)
        store.session("MIX", "s", "e", "1h", history=True).set_data({"v": 1}, 2)
        store.session("HIST", "s", "e", "1h", history=True).set_data({"v": 2}, 1)
        listed = store.list_values()
    found = {usage.name: usage for usage in sessionstore.namespaces(any_store)}
    assert len(listed) == 3
    assert (found[namespace].sessions, found[namespace].values) == (0, 3)


def test_namespaces_lists_each_namespace_with_its_sessions_and_values(any_store):
    ours = [f"t-{uuid.uuid4().hex[:8]}-{n}" for n in range(2)] + ["t-odd:name {x}"]
    fill(any_store, ours[0], sessions=2, values=1)
    fill(any_store, ours[1], sessions=0, values=3)
    fill(any_store, ours[2], sessions=1, values=0)
    found = {usage.name: usage for usage in sessionstore.namespaces(any_store)}
    assert (found[ours[0]].sessions, found[ours[0]].values) == (2, 1)
    assert (found[ours[1]].sessions, found[ours[1]].values) == (0, 3)
    assert (found[ours[2]].sessions, found[ours[2]].values) == (1, 0)
    rows = [
        json.loads(line)
        for line in run("namespaces", "--url", any_store, "--json").stdout.splitlines()
    ]
    by_name = {row.pop("name"): row for row in rows}
    assert {n: (r["sessions"], r["values"]) for n, r in by_name.items() if n in ours} == {
        ours[0]: (2, 1),
        ours[1]: (0, 3),
        ours[2]: (1, 0),
    }
    with sessionstore.connect(any_store, ours[0]) as store:
        sizes = [store.events.stored_bytes(info.id) for info in store.events.list()]
        value = store.session("SYM0", "s", "e", "1h").records().plain
        assert value is not None and value.payload is not None
    assert by_name[ours[0]]["bytes"] == sum(sizes) + len(value.payload) and all(sizes)
    table = run("namespaces", "--url", any_store)
    assert table.exit_code == 0 and ours[0] in table.stdout
    # Counts are of what exists: a deleted session and value are not counted, and a
    # namespace left with nothing is not listed (on Redis its index entries remain).
    with sessionstore.connect(any_store, ours[0]) as store:
        store.events.delete(store.events.list()[0].id)
        store.session(*store.list_values()[0][:4]).delete()
    with sessionstore.connect(any_store, ours[2]) as store:
        store.events.delete(store.events.list()[0].id)
    found = {usage.name: usage for usage in sessionstore.namespaces(any_store)}
    assert (found[ours[0]].sessions, found[ours[0]].values) == (1, 0)
    assert ours[2] not in found


def test_namespaces_of_an_empty_or_private_store_are_none(tmp_path):
    assert sessionstore.namespaces(str(tmp_path / "nothing")) == []
    assert not (tmp_path / "nothing").exists()
    assert sessionstore.namespaces(f"sqlite:///{tmp_path / 'none.db'}") == []
    assert not (tmp_path / "none.db").exists()
    assert sessionstore.namespaces("memory://") == []
    (tmp_path / "empty").mkdir()
    result = run("namespaces", "--url", str(tmp_path / "empty"))
    assert result.exit_code == 0 and "no namespace of" in result.stderr


READING = [
    ("namespaces",),
    ("sessions", "list"),
    ("values", "list"),
    ("sessions", "show", "s"),
    ("values", "get", "A", "s", "e", "1h"),
]


@pytest.mark.parametrize("command", READING)
@pytest.mark.parametrize("form", ["folder", "sqlite-relative", "sqlite-absolute"])
def test_a_command_that_only_reads_creates_no_store_and_names_the_path(
    tmp_path, monkeypatch, command, form
):
    """A path that does not exist is an error naming the absolute path it resolved to
    (a relative sqlite:/// path against the working directory), and nothing is made."""
    monkeypatch.chdir(tmp_path)
    database = tmp_path / "missing" / "store.db"
    url, path = {
        "folder": ("missing/store", tmp_path / "missing" / "store"),
        "sqlite-relative": ("sqlite:///missing/store.db", database),
        "sqlite-absolute": (f"sqlite:///{database}", database),
    }[form]
    result = run(*command, "--url", url)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: not found") and str(path) in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_least_privilege_user_is_told_namespaces_need_an_admin(acl_url):
    with pytest.raises(sessionstore.AccessDeniedError):
        sessionstore.namespaces(acl_url)
    result = run("namespaces", "--url", acl_url)
    assert result.exit_code == 2 and "admin" in result.stderr.splitlines()[-1]
    assert urlsplit(acl_url).password not in result.stderr


def test_an_empty_listing_names_the_store_the_namespace_and_where_data_is(tmp_path):
    url = str(tmp_path / "store")
    fill(url, "t-full", sessions=1, values=1)
    for args in (("sessions", "list"), ("values", "list")):
        result = run(*args, "--url", url, "-n", "t-empty")
        assert result.exit_code == 0 and result.stdout.strip() == ""
        assert "'t-empty'" in result.stderr and url in result.stderr
        assert "'t-full' (1 session, 1 value)" in result.stderr
        as_json = run(*args, "--url", url, "-n", "t-empty", "--json")
        assert as_json.stdout == "" and "'t-empty'" in as_json.stderr
    listed = run("sessions", "list", "--url", url, "-n", "t-full")
    assert "no sessions" not in listed.stderr


def test_info_reports_the_servers_own_expiry_also_one_set_by_hand(redis_server, namespace):
    url = redis_server.url + "?durability=none"
    fill(url, namespace, sessions=1, values=0)
    meta, events = sessionstore.keys.log_keys(namespace, "s0")
    admin = redis.Redis(port=redis_server.port)
    try:
        assert admin.pexpire(meta, 600_000) and admin.pexpire(events, 600_000)
        by_hand = admin.pexpiretime(meta)
        with sessionstore.connect(url, namespace) as store:
            assert store.events.info("s0").expires_at == by_hand
            assert [i.expires_at for i in store.events.list_info()] == [by_hand]
        listed = run("sessions", "list", "--url", url, "-n", namespace, "--json")
        assert json.loads(listed.stdout)["expires_at"] == by_hand
        admin.persist(meta)
        admin.persist(events)
        with sessionstore.connect(url, namespace) as store:
            assert store.events.info("s0").expires_at is None
    finally:
        admin.close()


def test_sessions_expire_sets_and_removes_a_retention(any_store, namespace):
    fill(any_store, namespace, sessions=1, values=0)
    common = ("--url", any_store, "-n", namespace, "--json")
    result = run("sessions", "expire", "s0", "--ttl", "3600", *common)
    assert result.exit_code == 0, result.stderr
    set_to = json.loads(result.stdout)
    assert set_to["id"] == "s0" and set_to["expires_at"] > time.time() * 1000 + 3_500_000
    listed = json.loads(run("sessions", "list", *common).stdout)
    assert listed["expires_at"] == set_to["expires_at"]
    human = run("sessions", "expire", "s0", "--persist", "--url", any_store, "-n", namespace)
    assert human.exit_code == 0 and "never expires" in human.stdout
    assert json.loads(run("sessions", "list", *common).stdout)["expires_at"] is None
    for wrong in ((), ("--ttl", "5", "--persist"), ("--ttl", "-1"), ("--ttl", "nan")):
        refused = run("sessions", "expire", "s0", *wrong, *common)
        assert refused.exit_code == 2 and refused.stderr.startswith("error: invalid argument")
    missing = run("sessions", "expire", "nope", "--ttl", "5", *common)
    assert missing.exit_code == 2 and "not found" in missing.stderr


def test_sessions_list_shows_each_sessions_size(any_store, namespace):
    fill(any_store, namespace, sessions=2, values=0)
    with sessionstore.connect(any_store, namespace) as store:
        store.events.append(
            "s1", [SessionEvent(seq=1, type="note", time=2, data={"t": "x" * 5000})]
        )
        sizes = {s: store.events.stored_bytes(s) for s in ("s0", "s1")}
    common = ("--url", any_store, "-n", namespace)
    rows = {
        row["id"]: row
        for row in map(json.loads, run("sessions", "list", *common, "--json").stdout.splitlines())
    }
    assert {s: rows[s]["bytes"] for s in sizes} == sizes and sizes["s1"] > sizes["s0"]
    assert rows["s1"]["events"] == 2
    wide = runner.invoke(app, ["sessions", "list", *common], terminal_width=200)
    assert "size" in wide.stdout and "KiB" in wide.stdout


def wait_expired(store: sessionstore.Store, key: tuple[str, str, str, str]) -> None:
    """Read the value at ``key`` until it has expired (at most 10 s)."""
    deadline = time.monotonic() + 10
    while store.session(*key).get_data(5) is not None:
        assert time.monotonic() < deadline, f"the value at {key} never expired"
        time.sleep(0.02)


def test_values_expire_sets_and_removes_a_values_retention(any_store, namespace):
    with sessionstore.connect(any_store, namespace) as store:
        store.session("BTCUSDT", "s", "e", "1h").set_data(1, 5)
    key = ("BTCUSDT", "s", "e", "1h")
    common = ("--url", any_store, "-n", namespace)
    result = run("values", "expire", *key, "--ttl", "0.3", *common, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == {"found": True}
    kept = run("values", "expire", *key, "--persist", *common)
    assert kept.exit_code == 0 and kept.stdout.strip() == "never expires"
    witness = ("WITNESS", "s", "e", "1h")
    with sessionstore.connect(any_store, namespace) as store:
        store.session(*witness, ttl=0.3).set_data(1, 5)  # the removed retention, given later
        wait_expired(store, witness)
        assert store.session(*key).get_data(5) == 1  # past the removed retention: still there
    assert run("values", "expire", *key, "--ttl", "0.05", *common).exit_code == 0
    with sessionstore.connect(any_store, namespace) as store:
        wait_expired(store, key)
    missing = run("values", "expire", *key, "--ttl", "60", *common)
    assert missing.exit_code == 2 and missing.stdout == ""
    assert missing.stderr.startswith("error: not found: nothing is stored under (BTCUSDT,")
    as_json = run("values", "expire", *key, "--ttl", "60", *common, "--json")
    assert as_json.exit_code == 2 and json.loads(as_json.stdout) == {"found": False}
    for wrong in ((), ("--ttl", "5", "--persist"), ("--ttl", "0")):
        refused = run("values", "expire", *key, *wrong, *common)
        assert refused.exit_code == 2 and refused.stderr.startswith("error: invalid argument")


@pytest.mark.parametrize("bad", ["redis://h:99999/0", "redis://[::1", "redis://127.0.0.1:-1/0"])
@pytest.mark.parametrize("given", ["--url", "env"])
def test_acl_names_a_malformed_url_as_an_invalid_argument(bad, given):
    if given == "env":
        result = run("acl", "bob", url_from_env=bad)
    else:
        result = run("acl", "bob", "--url", bad)
    assert result.exit_code == 2
    assert "invalid URL" in result.output and "unexpected" not in result.output
