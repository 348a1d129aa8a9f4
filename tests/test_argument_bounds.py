"""Every argument of ``connect`` and every parameter of a Redis URL is bounded or refused
with ``InvalidArgumentError`` before any I/O: timeouts are finite seconds within
``MAX_TIMEOUT``, socket parameters are checked, ``?max_connections=`` has a maximum, port
0 is refused, and an unknown parameter is named but its value never shown (not in the
error, ``mask_url``, a CLI error line or ``doctor --json``)."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from test_cli import cli

import sessionstore
import sessionstore.aio
from sessionstore.arguments import MAX_TIMEOUT
from sessionstore.errors import InvalidArgumentError
from sessionstore.redis.options import MAX_CONNECTIONS, OWN_PARAMS, REDIS_PY_PARAMS
from sessionstore.urls import SHOWN_PARAMS, is_secret_param, mask_url

#: Nothing listens on port 1: a store that got past validation would fail only at its
#: first call, which these tests never make.
REDIS = "redis://127.0.0.1:1/0"
BAD_TIMEOUTS = [1e300, float("inf"), float("nan"), -1, 0, MAX_TIMEOUT + 1, True, "5"]


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS, ids=repr)
@pytest.mark.parametrize("url", [REDIS, "memory://", "sqlite:///{tmp}/s.db", "{tmp}/files"])
def test_a_timeout_outside_the_documented_range_is_refused(url, timeout, tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"timeout must be a number of seconds in"):
        sessionstore.connect(url.format(tmp=tmp_path), timeout=timeout)
    with pytest.raises(InvalidArgumentError, match=r"timeout must be a number of seconds in"):
        sessionstore.aio.connect(url.format(tmp=tmp_path), timeout=timeout)


def test_the_longest_documented_timeout_is_accepted(tmp_path):
    for url in (REDIS, "memory://", f"sqlite:///{tmp_path}/s.db"):
        sessionstore.connect(url, timeout=MAX_TIMEOUT).close()


@pytest.mark.parametrize(
    "query",
    [
        "socket_timeout=1e300",
        "socket_timeout=nan",
        "socket_timeout=inf",
        "socket_timeout=-1",
        "socket_timeout=0",
        "socket_timeout=abc",
        "socket_connect_timeout=1e300",
        "socket_connect_timeout=-0.5",
        "health_check_interval=-1",
        "health_check_interval=1e9",
        "health_check_interval=9999999999999999999999",
        "socket_read_size=0",
        "socket_read_size=99999999999",
        "protocol=4",
        "db=-1",
        "db=99999999999",
        "socket_keepalive=maybe",
        "retry_on_timeout=x",
        "ssl_check_hostname=sometimes",
        "retry_on_error=ConnectionError",
        "db=0&socket_timeout=1&socket_timeout=1e300",
    ],
)
def test_a_socket_parameter_that_redis_py_could_not_use_is_refused(query):
    name = query.rpartition("&")[2].partition("=")[0]
    for scheme in ("redis://127.0.0.1:1/0", "redis+sentinel://127.0.0.1:1/svc"):
        with pytest.raises(InvalidArgumentError, match=rf"\?{name}="):
            sessionstore.connect(f"{scheme}?{query}")


def test_socket_parameters_within_their_range_reach_a_real_server(redis_server, namespace):
    query = (
        "socket_timeout=2.5&socket_connect_timeout=2&health_check_interval=0"
        "&socket_keepalive=yes&retry_on_timeout=False&socket_read_size=65536&protocol=2"
    )
    with sessionstore.connect(f"{redis_server.url}?{query}", namespace) as store:
        session = store.session("BTC", strategy="s", exchange="x", frame="1h")
        session.set_data({"n": 1}, 1)
        assert session.get_data(1) == {"n": 1}


def test_max_connections_has_a_documented_maximum_and_refusing_it_does_no_work():
    sessionstore.connect(f"{REDIS}?max_connections=1").close()  # what a first connect loads
    tracemalloc.start()
    try:
        for raw in (str(MAX_CONNECTIONS + 1), "10000000", "9" * 40):
            with pytest.raises(InvalidArgumentError, match=rf"\[1, {MAX_CONNECTIONS}\]"):
                sessionstore.connect(f"{REDIS}?max_connections={raw}")
        sessionstore.connect(f"{REDIS}?max_connections={MAX_CONNECTIONS}").close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The refusals allocate nothing: far below the 80 MB of one pool of 10**7 slots.
    assert peak < 8_000_000, f"{peak} bytes allocated at most"


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:0/0",
        "rediss://h:0",
        "redis+sentinel://127.0.0.1:0/svc",
        "redis+sentinel://h:1,h:0/svc",
    ],
)
def test_port_0_is_refused_rather_than_read_as_the_default(url):
    with pytest.raises(InvalidArgumentError, match="port"):
        sessionstore.connect(url)


SECRET = "hunter2-Xq9"


@pytest.mark.parametrize("name", ["pasword", "pw", "passwd_", "key", "Password2"])
def test_an_unknown_parameter_is_named_but_its_value_never_shown(name, tmp_path):
    for url in (
        f"{REDIS}?{name}={SECRET}",
        f"{REDIS}?db=0&{name}={SECRET}&cluster=no",
        f"sqlite:///{tmp_path}/s.db?{name}={SECRET}",
        f"memory://?{name}={SECRET}",
    ):
        with pytest.raises(InvalidArgumentError) as caught:
            sessionstore.connect(url)
        assert f"?{name}=" in str(caught.value)
        assert SECRET not in str(caught.value)
        assert SECRET not in mask_url(url)


def test_the_cli_and_doctor_never_show_an_unknown_parameters_value():
    url = f"{REDIS}?pasword={SECRET}"
    for args in (
        ["sessions", "list", "--url", url],
        ["values", "list", "--url", url],
        ["doctor", "--url", url, "--json"],
        ["doctor", "--url", url],
    ):
        result = cli(*args)
        assert result.returncode != 0, args
        assert "pasword" in result.stdout + result.stderr, args
        assert SECRET not in result.stdout + result.stderr, args
    doctor = cli("doctor", "--url", url, "--json")
    assert SECRET not in json.dumps(json.loads(doctor.stdout.splitlines()[0]))


def test_the_value_of_every_known_plain_parameter_is_shown_and_only_those():
    """``mask_url`` shows the values of the parameters a Redis URL accepts that are not
    secrets (so ``SHOWN_PARAMS`` keeps up with redis-py), and masks every other."""
    plain = {name for name in (*OWN_PARAMS, *REDIS_PY_PARAMS) if not is_secret_param(name)}
    assert plain <= SHOWN_PARAMS
    for name in SHOWN_PARAMS:
        assert mask_url(f"redis://h/0?{name}=v1") == f"redis://h/0?{name}=v1"
    assert mask_url("redis://h/0?db=1&x=v1&DB=v2") == "redis://h/0?db=1&x=***&DB=***"


@pytest.mark.parametrize(
    "durability",
    ["replicas:0", "replicas:1001", "replicas:1e20", "replicas:99999999999999999999",
     "replicas:\u0663", "replicas: 1", "replicas:1_0"],
)  # fmt: skip
def test_an_absurd_replica_count_is_refused_at_connect(durability):
    with pytest.raises(sessionstore.InvalidArgumentError, match="replicas:N"):
        sessionstore.connect(f"redis://localhost:1/0?durability={durability}")
    assert sessionstore.connect("redis://localhost:1/0?durability=replicas:1000")


@pytest.mark.parametrize("scheme", ["redis", "unix", "redis+sentinel"])
@pytest.mark.parametrize("name", ["ssl_cert_reqs", "ssl_ca_certs", "ssl_check_hostname"])
def test_a_tls_parameter_on_a_url_without_tls_is_refused_naming_it(scheme, name):
    where = {"redis": "localhost:1/0", "unix": "/tmp/none.sock", "redis+sentinel": "h:1/svc"}
    value = "no" if name == "ssl_check_hostname" else "none"
    url = f"{scheme}://{where[scheme]}?{name}={value}"
    with pytest.raises(sessionstore.InvalidArgumentError, match=f"{name}=.*rediss://"):
        sessionstore.connect(url)
    if scheme != "unix":
        sessionstore.connect(url.replace(scheme, scheme.replace("redis", "rediss"), 1)).close()
