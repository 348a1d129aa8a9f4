"""Least privilege, isolation, TLS and redaction against real redis-server processes."""

from __future__ import annotations

import datetime as dt
import ipaddress
import time
import warnings
from pathlib import Path

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from support.redis_server import RedisServer
from support.staleness import late_reads

import sessionstore
from sessionstore import (
    AccessDeniedError,
    DurabilityError,
    LibraryMissingError,
    SessionBusyError,
    SessionEvent,
    SessionHeader,
    SessionStoreError,
)
from sessionstore.redis.acl import grant_functions_args, setuser_args, setuser_line
from sessionstore.redis.library import install, library
from sessionstore.redis.tracking import BOUND
from sessionstore.redis.valueformat import ANY, swap_args

T0 = 1_718_000_000_000
PASSWORD = "pa55-w0rd-Secret"


@pytest.fixture(scope="module")
def server():
    with RedisServer() as server:
        install(redis.Redis(port=server.port))
        yield server


def admin(server: RedisServer) -> redis.Redis:
    return redis.Redis(port=server.port)


def user_url(server: RedisServer, user: str, durability: str = "aof") -> str:
    """A user's URL; ``durability=aof``: a user without CONFIG cannot use ``fsync``."""
    return f"redis://{user}:{PASSWORD}@127.0.0.1:{server.port}/0?durability={durability}"


def exercise(store) -> None:
    """Every kind of call: plain, history and updated values, with and without retention,
    and their deletion; the whole event-log API: appends, load, list and info, a writer
    and its lease, fork, retention, delete. It calls every function of the library."""
    s = store.session("BTCUSDT", "s", "e", "1h")
    s.set_data({"v": 1}, T0)
    assert s.update(lambda v: {"v": v["v"] + 1}, T0) == {"v": 2}
    h = store.session("BTCUSDT", "s", "e", "1h", history=True, max_versions=3)
    h.set_data(1, T0)
    assert h.update(lambda v: v + 1, T0 + 1) == 2
    assert h.get_data(T0) == 1
    kept = store.session("ETHUSDT", "s", "e", "1h", ttl=60)
    kept.set_data("for a minute", T0)
    assert kept.get_data(T0) == "for a minute"
    kept.delete()
    store.events.create(SessionHeader(id="acl"))
    store.events.append("acl", [SessionEvent(seq=0, type="turn/start", time=T0, data={"turn": 1})])
    assert [e.type for e in store.events.load("acl").events] == ["turn/start", "turn/end"]
    assert [x.id for x in store.events.list()] == ["acl"]
    assert len(store.events.read_from("acl", 1)) == 1
    assert store.events.info("acl").next_seq == 2
    store.events.fork("acl", "acl-fork", at_seq=1)
    assert [e.seq for e in store.events.read_from("acl-fork", 0)] == [0]
    store.events.create(SessionHeader(id="acl-ttl"), ttl=60)
    store.events.append("acl-ttl", [SessionEvent(seq=0, type="note", time=T0)])
    assert store.events.info("acl-ttl").expires_at is not None
    writer = store.events.writer(SessionHeader(id="acl-live"), window=0)
    writer.emit("note", {"n": 1})
    writer.flush()
    with pytest.raises(SessionBusyError):
        store.events.load("acl-live")
    writer.close()
    assert [e.data for e in store.events.load("acl-live").events] == [{"n": 1}]
    for session_id in ("acl", "acl-fork", "acl-ttl", "acl-live"):
        store.events.delete(session_id)
    assert store.events.list() == []


def test_the_least_privilege_user_can_do_everything_in_its_namespace(server):
    admin(server).execute_command(*setuser_args("run42", PASSWORD, "run-42"))
    with sessionstore.connect(user_url(server, "run42"), "run-42") as store:
        exercise(store)


def test_a_user_of_namespace_a_is_refused_namespace_b_and_b_stays_intact(server):
    admin(server).execute_command(*setuser_args("team-a", PASSWORD, "team-a"))
    with sessionstore.connect(server.url, "team-b") as owner:
        owner.session("BTCUSDT", "s", "e", "1h").set_data("b's value", T0)
        owner.events.create(SessionHeader(id="b-log"))
        owner.events.append("b-log", [SessionEvent(seq=0, type="note", time=T0)])
    with sessionstore.connect(user_url(server, "team-a"), "team-b") as intruder:
        s = intruder.session("BTCUSDT", "s", "e", "1h")
        for call in (
            lambda: s.get_data(T0),
            lambda: s.set_data("overwritten", T0),
            lambda: intruder.events.read_from("b-log", 0),
            lambda: intruder.events.append("b-log", [SessionEvent(seq=1, type="x", time=T0)]),
            lambda: intruder.events.delete("b-log"),
        ):
            with pytest.raises(AccessDeniedError) as caught:
                call()
            assert "denied" in str(caught.value).lower()
            assert "not found" not in str(caught.value).lower()
    with sessionstore.connect(server.url, "team-b") as owner:
        assert owner.session("BTCUSDT", "s", "e", "1h").get_data(T0) == "b's value"
        assert len(owner.events.read_from("b-log", 0)) == 1


def test_a_user_granted_all_but_dangerous_commands_works(server):
    admin(server).execute_command(
        "ACL", "SETUSER", "broad", "reset", "on", f">{PASSWORD}", "~ss:broad:*",
        "+@all", "-@dangerous", "+info", "+config|get",
    )  # fmt: skip
    with sessionstore.connect(user_url(server, "broad"), "broad") as store:
        exercise(store)


def test_fsync_for_a_user_without_config_raises_at_the_first_write_never_warns(server):
    admin(server).execute_command(
        "ACL", "SETUSER", "noconfig", "reset", "on", f">{PASSWORD}", "~ss:noconfig:*",
        "+@all", "-@dangerous", "+info",
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with sessionstore.connect(user_url(server, "noconfig", "fsync"), "noconfig") as store:
            store.events.create(SessionHeader(id="s"))
            with pytest.raises(DurabilityError) as caught:
                store.events.append("s", [SessionEvent(seq=0, type="note", time=T0)])
            assert store.events.list() == []
    assert "CONFIG GET" in str(caught.value) and "durability='aof'" in str(caught.value)
    assert PASSWORD not in str(caught.value)
    with sessionstore.connect(user_url(server, "noconfig"), "noconfig") as ok:
        exercise(ok)


# --- the least-privilege user cannot escalate ------------------------------------------

ADMIN_PASSWORD = "adm1n-Secret-pw"


@pytest.fixture(scope="module")
def locked():
    """A server of its own whose default user (the admin) needs a password."""
    with RedisServer() as own:
        root = redis.Redis(port=own.port)
        install(root)
        root.config_set("requirepass", ADMIN_PASSWORD)
        yield own


def _shell_words(line: str) -> list[str]:
    import shlex

    words = shlex.split(line)
    assert words[:1] == ["redis-cli"]
    return words[1:]


def _refused(client: redis.Redis, *command: str) -> bool:
    try:
        client.execute_command(*command)
    except redis.exceptions.NoPermissionError:
        return True
    except redis.exceptions.ResponseError as exc:  # a script's own call refused
        return "The user executing the script can't" in str(exc)
    return False


#: A script that writes, then never ends: once running, the server answers ``BUSY`` to
#: every client, and ``SCRIPT KILL`` answers ``UNKILLABLE`` (it wrote).
BUSY_LOOP = "redis.call('SET', KEYS[1], 'x') while true do end"


def test_the_printed_acl_line_makes_a_user_that_cannot_escalate(locked):
    root = redis.Redis(port=locked.port, password=ADMIN_PASSWORD)
    root.execute_command(*_shell_words(setuser_line("lp", PASSWORD, "mine")))
    root.hset("ss:theirs:val:{BTC:s:e:1h:backtest}", mapping={"v": "secret", "w": 1})
    root.xadd("ss:theirs:log:{s}:events", {"seq": 0}, id="0-1")
    root.set("ss:theirs:plain", "secret")
    user = redis.Redis(port=locked.port, username="lp", password=PASSWORD)
    sha = root.script_load("return redis.call('HGETALL', ARGV[1])")
    denied = [
        ("CONFIG", "GET", "*"), ("CONFIG", "GET", "requirepass"),
        ("CONFIG", "SET", "appendonly", "no"), ("CONFIG", "RESETSTAT"), ("CONFIG", "REWRITE"),
        ("ACL", "LIST"), ("ACL", "WHOAMI"), ("ACL", "GETUSER", "default"), ("ACL", "USERS"),
        ("SCAN", "0"), ("KEYS", "*"), ("RANDOMKEY",), ("MONITOR",),
        ("CLIENT", "LIST"), ("CLIENT", "KILL", "127.0.0.1:1"), ("CLIENT", "INFO"),
        ("DEBUG", "SLEEP", "0"), ("MODULE", "LIST"), ("FUNCTION", "LIST"),
        ("SHUTDOWN", "NOSAVE"), ("SLOWLOG", "GET"), ("FLUSHALL",), ("FLUSHDB",),
        ("INFO",), ("INFO", "keyspace"), ("INFO", "clients"), ("INFO", "all"),
        ("INFO", "server"), ("INFO", "commandstats"),
        ("EVAL", "return 1", "0"), ("SUBSCRIBE", "ch"), ("PUBLISH", "ch", "x"),
        ("DBSIZE",), ("MEMORY", "USAGE", "ss:theirs:plain"), ("OBJECT", "FREQ", "x"),
        ("GET", "ss:theirs:plain"), ("HGETALL", "ss:theirs:val:{BTC:s:e:1h:backtest}"),
        ("XRANGE", "ss:theirs:log:{s}:events", "-", "+"), ("EXISTS", "ss:theirs:plain"),
        ("DEL", "ss:theirs:plain"), ("HSET", "ss:theirs:plain2", "v", "x"),
        ("EVALSHA", sha, "1", "ss:theirs:plain", "ss:theirs:plain"),
        ("EVALSHA", sha, "1", "ss:mine:x", "ss:theirs:val:{BTC:s:e:1h:backtest}"),
        ("EVAL", "redis.log(redis.LOG_WARNING, 'forged')", "0"),
        ("SCRIPT", "LOAD", "return 1"), ("SCRIPT", "FLUSH"), ("SCRIPT", "KILL"),
        ("SCRIPT", "EXISTS", sha),
        ("FUNCTION", "LOAD", "#!lua name=own\nredis.register_function('own', function() end)"),
        ("FUNCTION", "DELETE", library().name), ("FUNCTION", "FLUSH"), ("FUNCTION", "DUMP"),
        ("FUNCTION", "KILL"), ("FUNCTION", "STATS"),
        ("FUNCTION", "LIST", "LIBRARYNAME", "sessionstore_", "WITHCODE"),
        # In its own namespace: nothing whose work outgrows its reply and its arguments
        # on a big key of its own (the functions remove versions by name).
        ("MEMORY", "USAGE", "ss:mine:big", "SAMPLES", "0"),
        ("ZREMRANGEBYSCORE", "ss:mine:big", "-inf", "+inf"),
        ("ZREMRANGEBYRANK", "ss:mine:big", "0", "-1"),
    ]  # fmt: skip
    # ACL DRYRUN asks the server's ACL without running the command (SHUTDOWN, MONITOR,
    # DEBUG, which the server may refuse for other reasons first); the others run too.
    unsafe = ("SHUTDOWN", "MONITOR", "DEBUG")
    allowed_by_acl = [c for c in denied if root.execute_command("ACL", "DRYRUN", "lp", *c) == b"OK"]
    ran = [c for c in denied if c[0] not in unsafe and not _refused(user, *c)]
    assert allowed_by_acl == [] and ran == []
    # A function of another library the admin installed is held to the same key pattern.
    root.execute_command(
        "FUNCTION", "LOAD",
        "#!lua name=other\nredis.register_function('other_hgetall', "
        "function(keys, args) return redis.call('HGETALL', args[1]) end)",
    )  # fmt: skip
    assert _refused(
        user, "FCALL", "other_hgetall", "1", "ss:mine:x", "ss:theirs:val:{BTC:s:e:1h:backtest}"
    )
    assert root.get("ss:theirs:plain") == b"secret" and root.ping()
    assert libraries(root) == sorted([library().name, "other"])
    # What it may ask of INFO shows no key name and no secret.
    text = str(user.info("persistence")) + str(user.info("cluster"))
    assert "theirs" not in text and ADMIN_PASSWORD not in text and PASSWORD not in text
    for durability in ("aof", "none"):
        url = f"redis://lp:{PASSWORD}@127.0.0.1:{locked.port}/0?durability={durability}"
        with sessionstore.connect(url, "mine") as store:
            exercise(store)
            assert [v.symbol for v in store.list_values()] == ["BTCUSDT", "BTCUSDT"]
            store.session("BTCUSDT", "s", "e", "1h").delete()
            store.session("BTCUSDT", "s", "e", "1h", history=True).delete()
    user.close()
    root.close()


def test_the_least_privilege_user_cannot_run_a_busy_loop_in_any_way(locked):
    """Run by the server, the script would hold it (every client answered BUSY, SCRIPT
    KILL UNKILLABLE): the user's reply would not come within its socket timeout."""
    root = redis.Redis(port=locked.port, password=ADMIN_PASSWORD)
    root.execute_command(*_shell_words(setuser_line("lp", PASSWORD, "mine")))
    user = redis.Redis(port=locked.port, username="lp", password=PASSWORD, socket_timeout=5)
    busy = "#!lua name=busy\nredis.register_function('busy', function(keys) " + BUSY_LOOP + " end)"
    for command in (
        ("EVAL", BUSY_LOOP, "1", "ss:mine:busy"),
        ("SCRIPT", "LOAD", BUSY_LOOP),
        ("FUNCTION", "LOAD", busy),
        ("FUNCTION", "LOAD", "REPLACE", busy),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.execute_command(*command)
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.execute_command("FCALL", "busy", "1", "ss:mine:busy")
    assert root.exists("ss:mine:busy") == 0 and root.ping()
    assert "busy" not in libraries(root)
    # Nor a function of another library an admin installed: only the library's own
    # functions are granted, each by name.
    root.execute_command("FUNCTION", "LOAD", busy)
    try:
        for verb in ("FCALL", "FCALL_RO"):
            with pytest.raises(redis.exceptions.NoPermissionError):
                user.execute_command(verb, "busy", "1", "ss:mine:busy")
        assert root.exists("ss:mine:busy") == 0 and root.ping()
    finally:
        root.function_delete("busy")
    user.close()
    root.close()


def libraries(client: redis.Redis) -> list[str]:
    """The names of the function libraries installed on the server."""
    return sorted(
        dict(zip(e[::2], e[1::2], strict=True))[b"library_name"].decode()
        for e in client.function_list()
    )


def doctor_fix(url: str) -> str:
    from typer.testing import CliRunner

    from sessionstore.cli import app

    result = CliRunner().invoke(app, ["doctor", "--fix", "--url", url], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.stdout
    return result.stdout


def test_a_user_that_finds_the_library_missing_is_told_the_command_that_installs_it():
    with RedisServer() as own:
        root = redis.Redis(port=own.port)
        root.execute_command(*_shell_words(setuser_line("lp", PASSWORD, "mine")))
        url = f"redis://lp:{PASSWORD}@127.0.0.1:{own.port}/0?durability=aof"
        with sessionstore.connect(url, "mine") as store:
            s = store.session("BTCUSDT", "s", "e", "1h")
            with pytest.raises(LibraryMissingError) as caught:
                s.set_data(1, T0)
            assert isinstance(caught.value, AccessDeniedError)
            message = str(caught.value)
            assert "sessionstore doctor --fix --url <admin url>" in message
            assert "FUNCTION LOAD" in message and library().name in message
            assert caught.value.library == library().name
            assert root.keys("ss:mine:val:*") == [] and libraries(root) == []
            admin_url = f"redis://127.0.0.1:{own.port}/0"
            assert f"functions: {library().name} is installed on the server (loaded now" in (
                doctor_fix(admin_url)
            )
            assert libraries(root) == [library().name]
            exercise(store)
        root.close()


def test_two_versions_of_the_library_are_installed_and_called_side_by_side(server):
    """A rolling upgrade: clients of the old version keep calling theirs while the new
    one is installed; one whose version is gone is told to install it."""
    root = admin(server)
    current = library()
    old_version = "0_0_9_0123456789"
    root.execute_command(
        "FUNCTION", "LOAD", current.source.replace(current.version.encode(), old_version.encode())
    )
    root.execute_command(*setuser_args("both", PASSWORD, "both"))
    # The old version's functions, granted as `sessionstore acl --upgrade` of that version
    # did: added to the user, changing nothing else.
    grants = grant_functions_args("both")
    root.execute_command(*[arg.replace(current.version, old_version) for arg in grants])
    user = redis.Redis(port=server.port, username="both", password=PASSWORD)
    assert user.execute_command("FCALL_RO", f"ss_{old_version}_version", 0) == old_version.encode()
    assert user.execute_command("FCALL_RO", current.version_function, 0) == current.version.encode()
    url = user_url(server, "both")
    with sessionstore.connect(url, "both") as store:
        exercise(store)
        assert user.execute_command(
            "FCALL", f"ss_{old_version}_value_swap", 2, "ss:both:val:{x}", "ss:both:seq:{x}",
            *swap_args(ANY, b"v", 1, ("slot", 1), 1000),
        ) == b"OK"  # fmt: skip
        root.function_delete(current.name)
        with pytest.raises(LibraryMissingError, match="sessionstore doctor --fix"):
            store.session("BTCUSDT", "s", "e", "1h").set_data(1, T0)
        assert user.execute_command("FCALL_RO", f"ss_{old_version}_version", 0)
        install(root)
        exercise(store)
    root.function_delete(f"sessionstore_{old_version}")
    user.close()
    root.close()


def test_the_upgrade_line_grants_the_commands_the_new_functions_send(server):
    """A user made by an older version's line lacks a command this version's functions
    send (they run with the caller's rights: here ``STRLEN``, which measures a stored
    lease before reading it): the upgrade line adds it with the functions, taking nothing
    away, and a writer's lease works."""
    root = admin(server)
    install(root)
    older = [arg for arg in setuser_args("older", PASSWORD, "older") if arg != "+strlen"]
    root.execute_command(*older, "+del")
    url = user_url(server, "older")
    with (
        sessionstore.connect(url, "older") as store,
        pytest.raises(sessionstore.SessionStoreError),
    ):
        store.events.writer(sessionstore.SessionHeader(id="w")).close()
    root.execute_command(*grant_functions_args("older"))
    with sessionstore.connect(url, "older") as store:
        writer = store.events.writer(sessionstore.SessionHeader(id="w"))
        writer.emit("note", {})
        writer.close()
        assert [e.type for e in store.events.load("w").events] == ["note"]
    # Nothing the older line granted is taken away.
    assert root.execute_command("ACL", "DRYRUN", "older", "DEL", "ss:older:x") == b"OK"
    root.close()


def test_a_server_without_functions_gets_the_scripts_by_evalsha():
    """Redis before 7 has no Functions (here renamed away): the store falls back to
    EVALSHA, and doctor says so."""
    no_functions = [
        arg for verb in ("FCALL", "FCALL_RO", "FUNCTION") for arg in ("--rename-command", verb, "")
    ]
    with RedisServer(*no_functions) as own:
        with sessionstore.connect(own.url, "old") as store:
            exercise(store)
        stats = redis.Redis(port=own.port).info("commandstats")
        assert stats["cmdstat_evalsha"]["calls"] > 0 and "cmdstat_fcall" not in stats
        assert "has no Redis Functions" in doctor_fix(own.url)


def test_a_wrong_password_is_access_denied_and_never_shown(server):
    admin(server).execute_command(*setuser_args("run42", PASSWORD, "run-42"))
    url = f"redis://run42:wrong-{PASSWORD}@127.0.0.1:{server.port}/0"
    with sessionstore.connect(url, "run-42") as store:
        with pytest.raises(AccessDeniedError) as caught:
            store.session("BTCUSDT", "s", "e", "1h").get_data(T0)
        assert PASSWORD not in str(caught.value)
        assert PASSWORD not in repr(store) and PASSWORD not in store.url


def test_errors_and_reprs_never_show_the_password():
    url = f"redis://user:{PASSWORD}@127.0.0.1:1/0?password={PASSWORD}"
    with sessionstore.connect(url, "x", timeout=0.5) as store:
        assert PASSWORD not in repr(store)
        with pytest.raises(SessionStoreError) as caught:
            store.session("BTCUSDT", "s", "e", "1h").get_data(T0)
    chain, error = [], caught.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__
    assert all(PASSWORD not in text for text in chain)
    assert "***" in chain[0]


# --- TLS ---------------------------------------------------------------------------------


def _certificate(subject: str, key, issuer_cert=None, issuer_key=None, ca: bool = False):
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_cert.subject if issuer_cert else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key or key, hashes.SHA256())


def _write(path: Path, cert=None, key=None) -> str:
    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    else:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return str(path)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("sessionstore-test-ca", ca_key, ca=True)
    files = {"ca": _write(folder / "ca.crt", cert=ca)}
    for role in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        files[f"{role}_cert"] = _write(
            folder / f"{role}.crt", cert=_certificate(role, key, ca, ca_key)
        )
        files[f"{role}_key"] = _write(folder / f"{role}.key", key=key)
    return files


def test_rediss_with_a_client_certificate_passes_a_smoke_subset(tls_files):
    from support.redis_server import free_port

    tls_port = free_port()
    extra = (
        "--tls-port",
        str(tls_port),
        "--tls-cert-file",
        tls_files["server_cert"],
        "--tls-key-file",
        tls_files["server_key"],
        "--tls-ca-cert-file",
        tls_files["ca"],
        "--tls-auth-clients",
        "yes",
    )
    with RedisServer(*extra):
        url = (
            f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={tls_files['ca']}"
            f"&ssl_certfile={tls_files['client_cert']}&ssl_keyfile={tls_files['client_key']}"
        )
        with sessionstore.connect(url, "tls") as store:
            exercise(store)
        without_cert = f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={tls_files['ca']}"
        with (
            sessionstore.connect(without_cert, "tls", timeout=2) as store,
            pytest.raises(SessionStoreError),
        ):
            store.session("BTCUSDT", "s", "e", "1h").get_data(T0)


# --- the least-privilege user on a Cluster and through Sentinel ----------------------------


def test_doctor_fix_installs_the_library_on_every_primary_for_the_user_of_a_cluster(
    redis_cluster,
):
    primaries = redis_cluster.primaries()
    for node in primaries:
        redis.Redis(port=node.port).function_flush()
    for node in redis_cluster.running():
        redis.Redis(port=node.port).execute_command(
            *_shell_words(setuser_line("lp", PASSWORD, "mine"))
        )
    user_cluster = redis_cluster.url.replace("redis://", f"redis://lp:{PASSWORD}@")
    with sessionstore.connect(f"{user_cluster}?durability=none", "mine") as store:
        with pytest.raises(LibraryMissingError, match="sessionstore doctor --fix --url"):
            store.session("BTCUSDT", "s", "e", "1h").set_data(1, T0)
        assert f"{library().name} is installed on {len(primaries)} primaries (loaded now on" in (
            doctor_fix(redis_cluster.url)
        )
        for node in primaries:
            assert libraries(redis.Redis(port=node.port)) == [library().name]
        exercise(store)
        assert [v.symbol for v in store.list_values()] == ["BTCUSDT", "BTCUSDT"]


def test_the_user_of_a_sentinel_service_runs_the_library_installed_on_its_primary():
    from support.redis_sentinel import SentinelSetup

    with SentinelSetup() as setup:
        for node in setup.data_nodes:
            redis.Redis(port=node.port).execute_command(
                *_shell_words(setuser_line("lp", PASSWORD, "mine"))
            )
        assert f"{library().name} is installed on the server (loaded now" in doctor_fix(setup.url)
        primary = redis.Redis(port=setup.primary.port)
        assert primary.execute_command("WAIT", 2, 5000) == 2
        for node in setup.data_nodes:
            assert libraries(redis.Redis(port=node.port)) == [library().name]
        url = setup.url.replace("redis+sentinel://", f"redis+sentinel://lp:{PASSWORD}@")
        with sessionstore.connect(f"{url}?durability=aof", "mine") as store:
            exercise(store)


# --- the least-privilege user's value cache ---------------------------------------------


def _resp(*words: str) -> bytes:
    out = b"*%d\r\n" % len(words)
    for word in words:
        raw = word.encode()
        out += b"$%d\r\n%s\r\n" % (len(raw), raw)
    return out


class _Raw:
    """A connection that sends commands as given and keeps every byte the server sends
    (replies and pushes alike), to see exactly what a client could learn."""

    def __init__(self, port: int) -> None:
        import socket

        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.received = b""

    def call(self, *words: str) -> bytes:
        """Send one command, then a ``PING`` marker; what came before the marker's echo."""
        marker = f"end-{len(self.received)}-{id(words)}"
        self.sock.sendall(_resp(*words) + _resp("PING", marker))
        start = len(self.received)
        while marker.encode() + b"\r\n" not in self.received[start:]:
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the connection"
            self.received += chunk
        return self.received[start:]

    def close(self) -> None:
        self.sock.close()


def test_the_least_privilege_user_caches_and_cannot_learn_others_key_names(server):
    """Redis 7.0 checks CLIENT TRACKING only as a command: BCAST (with or without PREFIX)
    would report every key changed, the user's patterns notwithstanding. So the user is
    refused tracking outright, and ``?cache=yes`` still works for it (timed)."""
    root = admin(server)
    root.execute_command(*setuser_args("tenant", PASSWORD, "tenant"))
    root.execute_command(*setuser_args("neighbour", PASSWORD, "neighbour"))
    target = root.client_id()
    attempts = {
        "bcast-prefix-resp3": (("HELLO", "3", "AUTH", "tenant", PASSWORD),
                               ("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "ss:neighbour:")),
        "bcast-resp3": (("HELLO", "3", "AUTH", "tenant", PASSWORD),
                        ("CLIENT", "TRACKING", "ON", "BCAST")),
        "default-resp3": (("HELLO", "3", "AUTH", "tenant", PASSWORD),
                          ("CLIENT", "TRACKING", "ON")),
        "redirect-resp2": (("AUTH", "tenant", PASSWORD),
                           ("CLIENT", "TRACKING", "ON", "BCAST", "REDIRECT", str(target))),
    }  # fmt: skip
    connections = {name: _Raw(server.port) for name in attempts}
    try:
        for name, (hello, tracking) in attempts.items():
            assert not connections[name].call(*hello).startswith(b"-"), name
            assert connections[name].call(*tracking).startswith(b"-NOPERM"), name
            connections[name].call("HMGET", "ss:tenant:val:{x}", "v")
            assert root.execute_command("ACL", "DRYRUN", "tenant", *tracking) != b"OK"
        with sessionstore.connect(user_url(server, "neighbour"), "neighbour") as other:
            for n in range(5):
                other.session("BTCUSDT", "s", "e", f"{n}m").set_data(n, T0)
        for name, connection in connections.items():
            connection.call("PING")  # everything the server sent meanwhile is in
            assert b"neighbour" not in connection.received, name
            assert b"invalidate" not in connection.received, name
    finally:
        for connection in connections.values():
            connection.close()
        root.close()
    url = user_url(server, "tenant") + "&cache=yes"
    with (
        sessionstore.connect(url, "tenant") as store,
        sessionstore.connect(user_url(server, "tenant"), "tenant") as writer,
    ):
        value = store.session("BTCUSDT", "s", "e", "1h")
        value.set_data({"n": 1}, T0)
        before = _calls(server, "hmget")
        for _ in range(50):
            assert value.get_data(T0) == {"n": 1}
        assert _calls(server, "hmget") - before < 50, "nothing was answered from memory"
        writer.session("BTCUSDT", "s", "e", "1h").set_data({"n": 2}, T0)
        acknowledged = time.monotonic()
        assert late_reads(lambda: value.get_data(T0), {"n": 2}, acknowledged, BOUND) == []


def _calls(server: RedisServer, command: str) -> int:
    stats = admin(server).info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
