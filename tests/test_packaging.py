"""The built wheel carries the Lua scripts and works against Redis from a fresh venv."""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import sys, sessionstore
assert sessionstore.__file__.startswith(sys.prefix), sessionstore.__file__
store = sessionstore.connect(sys.argv[1], namespace="wheel-probe")
s = store.session("BTCUSDT", "s", "e", "f")
s.set_data({"ok": 1}, 5)
assert s.update(lambda v: {"ok": v["ok"] + 1}, 5) == {"ok": 2}
store.events.create(sessionstore.SessionHeader(id="w"))
store.events.append("w", [sessionstore.SessionEvent(seq=0, type="note", time=1)])
assert [e.seq for e in store.events.load("w").events] == [0]
print("wheel ok")
"""


def _dependency_dirs() -> list[str]:
    """Where the running interpreter finds the dependencies: its own site-packages (a
    virtualenv's, when the tests run in one), the user site and the base ones."""
    dirs = [sysconfig.get_paths()[name] for name in ("purelib", "platlib")]
    dirs += site.getsitepackages() + [site.getusersitepackages()]
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


def probe_venv(env_dir: Path) -> Path:
    """A fresh venv that sees the running interpreter's dependencies (not the base
    interpreter's: ``system_site_packages`` would, which breaks inside a virtualenv)
    after its own site-packages, so a wheel installed into it wins over any other copy."""
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(own) / "outer-dependencies.pth").write_text("\n".join(_dependency_dirs()) + "\n")
    return python


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
    )
    [built] = out.glob("sessionstore-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_contains_every_lua_script(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    scripts = sorted(p.name for p in (ROOT / "lua").glob("*.lua"))
    assert scripts, "the repository has no lua scripts"
    assert sorted(Path(n).name for n in names if n.startswith("sessionstore/lua/")) == scripts
    assert "sessionstore/py.typed" in names


@pytest.mark.slow
def test_the_installed_wheel_runs_redis_scripts(wheel, tmp_path, redis_server):
    python = probe_venv(tmp_path / "venv")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        check=True,
    )
    result = subprocess.run(
        [str(python), "-c", PROBE, redis_server.url], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "wheel ok" in result.stdout
