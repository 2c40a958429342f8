"""Ray clusters dlas starts or tells users to start let in only a driver with the token.

A real head (`ray start --head`, the command docs/cluster.md gives, on loopback with the
workspace's token) and real drivers, each in its own process so that Ray's
per-process environment and caches never leak between them: the dlas driver of the
workspace joins and runs a task; one with another workspace's token and a plain driver
with no token are refused. And dlas's own local Ray: token on, loopback only, and no
token-authentication warning.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlas.runner import ray_auth

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

ROOT = Path(__file__).resolve().parents[1]
RAY_WARNING = "Token authentication is"  # both of Ray's warnings start so


# --- the token file and the environment (no Ray) -------------------------------------

def test_the_token_is_made_once_private_and_kept(tmp_path: Path) -> None:
    path = ray_auth.ensure_token(ray_auth.token_path(tmp_path / "ws"))
    assert path == tmp_path / "ws" / "ray-auth-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0
    assert ray_auth.ensure_token(path).read_text() == token  # kept, not remade
    path.chmod(0o644)  # readable by others: no secret, tightened
    ray_auth.ensure_token(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in path.parent.iterdir() if p != path]  # no temporary left
    path.write_text("")
    with pytest.raises(ValueError, match="empty"):
        ray_auth.ensure_token(path)


def test_the_users_own_ray_settings_win(tmp_path: Path) -> None:
    path = str(tmp_path / "ray-auth-token")
    assert ray_auth.auth_env(tmp_path, {}) == {"RAY_AUTH_MODE": "token",
                                               "RAY_AUTH_TOKEN_PATH": path}
    assert ray_auth.auth_env(tmp_path, {"RAY_AUTH_TOKEN_PATH": "/t"}) == {
        "RAY_AUTH_MODE": "token"}
    assert ray_auth.auth_env(tmp_path, {"RAY_AUTH_MODE": "disabled"}) == {}
    assert ray_auth.shell_exports(tmp_path) == (
        f"export RAY_AUTH_MODE=token\nexport RAY_AUTH_TOKEN_PATH={path}\n")
    assert ray_auth.is_loopback("local") and ray_auth.is_loopback("127.0.0.1:6379")
    assert ray_auth.is_loopback("localhost:6379") and ray_auth.is_loopback("[::1]:6379")
    assert not ray_auth.is_loopback("10.0.0.1:6379")
    assert not ray_auth.is_loopback("auto") and not ray_auth.is_loopback("ray://h:10001")


# --- real clusters ----------------------------------------------------------------------

def _clean_env(home: Path) -> dict[str, str]:
    """This process's environment without Ray's variables, HOME elsewhere (so no
    ~/.ray/auth_token is found), and this checkout importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(pid: int) -> list[str]:
    """The addresses the process tree under `pid` listens on (TCP)."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    out = []
    for proc in procs:
        try:
            conns = proc.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        out += [c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN]
    return out


def _loopback(ip: str) -> bool:
    return ip.startswith("127.") or ip in ("::1", "::ffff:127.0.0.1")


@pytest.fixture
def head(tmp_path: Path) -> Iterator[tuple[str, Path, int]]:
    """`ray start --head` on loopback, on the workspace's token (what
    `python -m dlas.runner.ray_auth` exports), in a short temporary folder of its own
    (Unix socket paths are short, and /tmp/ray's "current cluster" stays untouched).
    Yields (address, workspace, pid of `ray start`)."""
    ws = tmp_path / "ws"
    exports = subprocess.run([sys.executable, "-m", "dlas.runner.ray_auth", "--workspace",
                              str(ws)], capture_output=True, text=True, check=True,
                             cwd=ROOT, env=_clean_env(tmp_path)).stdout
    env = _clean_env(tmp_path)
    env.update(line.removeprefix("export ").split("=", 1) for line in exports.splitlines())
    env[ray_auth.LOOPBACK_VAR] = "0"  # a one-machine cluster: bind 127.0.0.1 only
    port = _free_port()
    temp = Path(tempfile.mkdtemp(prefix="dlas-ray-"))
    ray = Path(sys.executable).with_name("ray")
    log = (tmp_path / "head.log").open("w")
    proc = subprocess.Popen(
        [str(ray), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
         "--port", str(port), "--include-dashboard", "false", "--num-cpus", "1",
         "--disable-usage-stats", "--temp-dir", str(temp)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "head.log").read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the head did not start"
                time.sleep(0.2)
        yield f"127.0.0.1:{port}", ws, proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)  # `ray start --block` stops its node
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: what it started
            proc.wait()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


DLAS_DRIVER = """
import sys
import ray
from dlas.runner.ray_executor import RayRefused, RayRunner
from dlas.runner.workspace import Workspace
runner = RayRunner(Workspace(sys.argv[1]), address=sys.argv[2], progress=False)
try:
    with runner.session():
        print("JOINED", runner._auth, ray.get(ray.remote(lambda: 6 * 7).remote()))
except RayRefused as exc:
    print("REFUSED", exc)
"""

PLAIN_DRIVER = """
import sys
import ray
try:
    ray.init(address=sys.argv[1], logging_level="ERROR")
except ConnectionError as exc:
    print("FAILED", exc)
else:
    print("JOINED", ray.get(ray.remote(lambda: 6 * 7).remote()))
"""


def _driver(code: str, *args: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120)
    return done.stdout + done.stderr


def test_only_a_driver_with_the_clusters_token_gets_in(head, tmp_path: Path) -> None:
    address, ws, pid = head
    listening = _listening(pid)  # GCS, raylet, agents: none reachable from elsewhere
    assert listening and all(_loopback(ip) for ip in listening), listening
    env = _clean_env(tmp_path)
    out = _driver(DLAS_DRIVER, str(ws), address, env=env)  # the workspace's token
    assert f"JOINED token authentication on, token in {ws / 'ray-auth-token'} 42" in out, out

    other = tmp_path / "other-ws"  # another workspace: another token
    out = _driver(DLAS_DRIVER, str(other), address, env=env)
    assert "REFUSED" in out and "JOINED" not in out, out
    assert "Authentication token is missing or incorrect" in out
    assert f"token in {other / 'ray-auth-token'}" in out and "docs/cluster.md" in out
    # and `dlas run` from that workspace stops with exit 2 and what to do, no traceback
    from tests.conftest import tiny_sweep

    config = tmp_path / "tiny.yaml"
    config.write_text(tiny_sweep().replace("tiny_cnn", "resnet18"))  # no plugin there
    done = subprocess.run([sys.executable, "-m", "dlas.cli", "run", str(config),
                           "--executor", "ray", "--ray-address", address, "--workspace",
                           str(other), "--no-progress"], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "refused this driver" in said and "docs/cluster.md" in said, said
    assert "Traceback" not in said, said

    # Ray's own driver, no token (Ray gives up after 20 tries; 1 is enough here); it
    # stays on loopback, or Ray would look for the head on the outward address
    plain = {**env, ray_auth.LOOPBACK_VAR: "0", "RAY_gcs_server_port_wait_time_s": "1"}
    out = _driver(PLAIN_DRIVER, address, env=plain)
    assert "FAILED" in out and "JOINED" not in out, out
    assert "Unauthenticated: RPC error: InvalidAuthToken" in out, out  # for want of a token


LOCAL_DRIVER = """
import os, sys
import ray
from dlas.runner.ray_executor import RayRunner
from dlas.runner.workspace import Workspace
runner = RayRunner(Workspace(sys.argv[1]), progress=False)
with runner.session():
    mode = ray.get(ray.remote(lambda: os.environ.get("RAY_AUTH_MODE")).remote())
    print("GCS", ray.get_runtime_context().gcs_address, "WORKER_MODE", mode, flush=True)
    sys.stdin.readline()  # the test looks at what listens, then lets it go
print("LEFT", sorted(k for k in os.environ if k.startswith("RAY_AUTH")))
"""


def test_dlas_local_ray_is_token_only_loopback_only_and_quiet(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    proc = subprocess.Popen([sys.executable, "-c", LOCAL_DRIVER, str(ws)], cwd=ROOT,
                            env=_clean_env(tmp_path), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        first = proc.stdout.readline()
        listening = _listening(proc.pid)
        proc.stdin.write("\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert first.startswith("GCS 127.0.0.1:") and "WORKER_MODE token" in first, (first, err)
    assert listening and all(_loopback(ip) for ip in listening), listening
    assert "LEFT []" in out, out  # the driver's environment is restored
    assert RAY_WARNING not in err, err
    assert stat.S_IMODE((ws / "ray-auth-token").stat().st_mode) == 0o600
