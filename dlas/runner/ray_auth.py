"""Token authentication and loopback binding for the Ray clusters dlas starts and joins.

Anyone who can reach a Ray cluster's ports can submit a task, and a task is arbitrary
Python run as the user who started the node. Ray 2.60 closes that with a shared token
(`ray/_private/authentication/`): with `RAY_AUTH_MODE=token` every gRPC and HTTP entry
point (GCS, raylets, workers, dashboard) refuses a caller that does not present it. Ray
reads the token from, in order, `RAY_AUTH_TOKEN`, the file `RAY_AUTH_TOKEN_PATH`, and
`~/.ray/auth_token`; the mode and the token are read from the environment, so every node
and every driver needs both.

dlas keeps one token per workspace, `<workspace>/ray-auth-token` (64 hex characters,
mode 0600), made on first use. The workspace is the one path every node of a dlas cluster
already shares (docs/cluster.md), so the same file reaches the head, the workers and the
driver without copying a secret around. `python -m dlas.runner.ray_auth --workspace WS`
prints the variables `ray start` needs on each node.

A local cluster (`dlas run --executor ray` without an address) is also kept off the
network: Ray resolves 127.0.0.1 to the machine's outward address and binds its gRPC ports
on every interface, unless it believes multi-node clusters are off (the knob it has for
macOS and Windows); then the node's address is 127.0.0.1 and nothing listens elsewhere.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import secrets
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

#: The workspace's token file.
TOKEN_FILE = "ray-auth-token"
MODE_VAR = "RAY_AUTH_MODE"
TOKEN_VAR = "RAY_AUTH_TOKEN"
TOKEN_PATH_VAR = "RAY_AUTH_TOKEN_PATH"
#: Ray's "no multi-node clusters" switch (`ray._private.ray_constants.ENABLE_RAY_CLUSTER`):
#: when "0", `services.get_node_ip_address` answers 127.0.0.1 and the node binds there.
LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def token_path(workspace_root: Path) -> Path:
    """Where the workspace keeps its Ray token."""
    return Path(workspace_root) / TOKEN_FILE


def ensure_token(path: Path) -> Path:
    """The token file at `path`, made (random, owner-only) if missing.

    Written to a private temporary file and linked into place, so a concurrent dlas (or a
    node reading it over NFS) never sees a half-written token: Ray aborts on an empty
    `RAY_AUTH_TOKEN_PATH` file rather than run without one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32))
            with contextlib.suppress(FileExistsError):  # another process made it first
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    _check_private(path)
    return path


def _check_private(path: Path) -> None:
    """A token others can read is no secret: tighten it to 0600 (only its owner can), and
    refuse an empty one (Ray would abort on it with a less helpful message)."""
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        os.chmod(path, 0o600)
    if not path.read_text().strip():
        raise ValueError(f"the Ray token file {path} is empty; delete it and dlas makes a "
                         "new one (restart the cluster's nodes with it)")


def auth_env(workspace_root: Path, environ: Mapping[str, str] | None = None
             ) -> dict[str, str]:
    """The variables that turn token authentication on with the workspace's token.

    What the user set wins: an explicit `RAY_AUTH_MODE` (also `disabled`, to join a cluster
    that has no token), and a token of their own in `RAY_AUTH_TOKEN` or
    `RAY_AUTH_TOKEN_PATH` (a cluster started with another token).
    """
    environ = os.environ if environ is None else environ
    env: dict[str, str] = {}
    if MODE_VAR not in environ:
        env[MODE_VAR] = "token"
    mode = environ.get(MODE_VAR, env.get(MODE_VAR, "")).lower()
    if mode == "token" and not (environ.get(TOKEN_VAR) or environ.get(TOKEN_PATH_VAR)):
        env[TOKEN_PATH_VAR] = str(ensure_token(token_path(workspace_root)))
    return env


def describe(environ: Mapping[str, str] | None = None) -> str:
    """How this process authenticates to Ray, for the console and error messages (never
    the token itself)."""
    environ = os.environ if environ is None else environ
    if environ.get(MODE_VAR, "").lower() != "token":
        return f"token authentication off ({MODE_VAR}={environ.get(MODE_VAR, '')})"
    if environ.get(TOKEN_VAR):
        return f"token authentication on, token from ${TOKEN_VAR}"
    if environ.get(TOKEN_PATH_VAR):
        return f"token authentication on, token in {environ[TOKEN_PATH_VAR]}"
    return "token authentication on, token in ~/.ray/auth_token"


def is_loopback(address: str) -> bool:
    """True for a new local instance ("local") and a HOST:PORT on this machine's loopback
    (a driver must then stay on loopback too: Ray would swap 127.0.0.1 for the outward
    address the cluster does not listen on)."""
    if address == "local":
        return True
    if "://" in address:
        return False
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def secured_ray(workspace_root: Path, *, loopback: bool) -> Iterator[str]:
    """Within: this process, and the Ray processes it starts, use token authentication
    with the workspace's token, and with `loopback` a new node binds to 127.0.0.1 only.
    Yields `describe()`. Ray is to be initialized and shut down inside; on exit the
    environment is as before (tests run several clusters in one process)."""
    env = auth_env(workspace_root)
    if loopback:
        env[LOOPBACK_VAR] = "0"
    try:
        with _environ(env), _ray_cluster_switch(not loopback):
            _reload_ray_auth()
            yield describe()
    finally:
        _reload_ray_auth()  # the environment is restored: back to what it says


@contextlib.contextmanager
def _environ(updates: Mapping[str, str]) -> Iterator[None]:
    """`os.environ` with `updates` (Ray's child processes inherit it), restored on exit."""
    saved = {k: os.environ.get(k) for k in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _ray_cluster_switch(enabled: bool) -> Iterator[None]:
    """Ray reads its multi-node switch once, at import (`ray_constants.ENABLE_RAY_CLUSTER`),
    and this process may have imported Ray already: set the value it consults."""
    from ray._private import ray_constants

    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = before and enabled
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


def _reload_ray_auth() -> None:
    """Ray caches the mode (RayConfig) and the token (its loader) per process: make this
    process see the variables now set. Config first, as Ray's own tests do, so that no
    gRPC thread reloads a token under a stale mode."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@dataclass(frozen=True)
class Refusal:
    """Why a cluster refused this driver: Ray's message and how this driver
    authenticates."""

    reason: str
    auth: str


def probe(address: str) -> Refusal | None:
    """Ask the cluster's GCS at HOST:PORT whether it accepts this process's token; a
    refusal here takes milliseconds, where `ray.init` retries for 20 s first. Anything
    else than a refusal (including no answer) is left to `ray.init`."""
    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError

    try:
        GcsClient(address=address)
    except AuthenticationError as exc:
        return Refusal(str(exc).split(". ")[0], describe())
    except Exception:  # noqa: BLE001 - not ours to judge; ray.init says what it is
        return None
    return None


def shell_exports(workspace_root: Path) -> str:
    """The `export` lines that put a shell (then `ray start`) on the workspace's token."""
    env = auth_env(workspace_root, environ={})
    return "".join(f"export {k}={v}\n" for k, v in env.items())


def main(argv: list[str] | None = None) -> int:
    """`python -m dlas.runner.ray_auth --workspace WS`: make the workspace's token if
    missing and print what `ray start` needs; `eval "$(...)"` applies it."""
    parser = argparse.ArgumentParser(
        prog="python -m dlas.runner.ray_auth",
        description="Print the environment that puts `ray start` on the workspace's Ray "
                    "token (made on first use, mode 0600).")
    parser.add_argument("--workspace", type=Path, default=Path(os.environ.get(
        "DLAS_WORKSPACE", Path.cwd() / "dlas-workspace")))
    args = parser.parse_args(argv)
    sys.stdout.write(shell_exports(args.workspace.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
