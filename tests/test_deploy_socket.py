"""Can the gateway connect to vLLM's Unix socket in the rendered pod?

vLLM 0.33 creates its --uds socket with a plain bind() (launcher.create_server_unix_socket):
the file's mode is 0777 & ~umask, its owner vLLM's uid, its group vLLM's gid (or the folder's,
when the folder is setgid, as kubelet makes an emptyDir with an fsGroup). connect() needs write
permission on it. The pod's settings are read from the rendered Deployment, the permission
rule is checked against the kernel, and then, as root, played for real: a vLLM stand-in binds
the socket as vLLM does under the pod's uid, gid and umask, and a process under the gateway
container's uid and groups connects to it (and one of another uid cannot)."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from gateway.stub_upstream import create_stub_app, stub_state_key
from tests.deploy_helpers import BASE, GATEWAY_CONTAINER, VLLM_CONTAINER, Rendered, rendered


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    groups: frozenset[int]


def socket_mode(umask: int) -> int:
    """The permission bits bind() gives a Unix socket file (Linux: 0777 before the umask)."""
    return 0o777 & ~umask


def may_connect(mode: int, owner: Identity, client: Identity) -> bool:
    """Linux's check for connect() on a socket file: write permission (root bypasses it)."""
    if client.uid == 0:
        return True
    if client.uid == owner.uid:
        return bool(mode & 0o200)
    if owner.gid in client.groups | {client.gid}:
        return bool(mode & 0o020)
    return bool(mode & 0o002)


def pod_identity(out: Rendered, container: str) -> Identity:
    """The uid, gid and groups a container's processes have (fsGroup is a supplementary group)."""
    pod = out.pod.get("securityContext", {})
    uid, gid = out.effective(container, "runAsUser"), out.effective(container, "runAsGroup")
    groups = {*pod.get("supplementalGroups", []), *([pod["fsGroup"]] if "fsGroup" in pod else [])}
    return Identity(uid, gid, frozenset(groups))


def vllm_umask(out: Rendered) -> int:
    (script,) = out.container(VLLM_CONTAINER)["args"]
    words = shlex.split(script)
    assert words.index("umask") < words.index("exec"), "the umask must be set before vLLM starts"
    value = words[words.index("umask") + 1]
    assert re.fullmatch(r"0?[0-7]{3}", value), value
    return int(value, 8)


def socket_owner(out: Rendered) -> Identity:
    """Who owns the socket vLLM binds: its uid; the folder's group when the emptyDir is setgid
    (an fsGroup makes it so), else vLLM's gid."""
    vllm = pod_identity(out, VLLM_CONTAINER)
    fs_group = out.pod.get("securityContext", {}).get("fsGroup")
    return Identity(vllm.uid, fs_group if fs_group is not None else vllm.gid, frozenset())


@pytest.fixture(scope="module")
def base() -> Rendered:
    return rendered(BASE)


# --- the rule, against the kernel --------------------------------------------------------------


@given(st.integers(min_value=0, max_value=0o777))
def test_bind_gives_the_socket_0777_less_the_umask(umask: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "s.sock")
        previous = os.umask(umask)
        try:
            with socket.socket(socket.AF_UNIX) as server:
                server.bind(path)  # as vLLM's create_server_unix_socket does
                assert os.stat(path).st_mode & 0o777 == socket_mode(umask)
        finally:
            os.umask(previous)


@given(
    umask=st.integers(min_value=0, max_value=0o777),
    same_uid=st.booleans(),
    in_group=st.booleans(),
)
def test_only_write_permission_decides(umask: int, same_uid: bool, in_group: bool) -> None:
    mode = socket_mode(umask)
    owner = Identity(10001, 10001, frozenset())
    client = Identity(10001 if same_uid else 10002, 10002, frozenset({10001} if in_group else ()))
    expected_bit = 0o200 if same_uid else 0o020 if in_group else 0o002
    assert may_connect(mode, owner, client) == bool(mode & expected_bit)


# --- the rendered pod -------------------------------------------------------------------------


def test_the_gateway_may_connect_and_only_the_pods_uid_may(base: Rendered) -> None:
    mode = socket_mode(vllm_umask(base))
    owner = socket_owner(base)
    assert may_connect(mode, owner, pod_identity(base, GATEWAY_CONTAINER))
    stranger = Identity(owner.uid + 1, owner.uid + 1, frozenset())
    assert not may_connect(mode, owner, stranger)  # and nobody else
    assert mode & 0o077 == 0  # srwx------: not even the pod's group


# --- played for real, as root -----------------------------------------------------------------
# Forked children switch identity in place: the interpreter may live where other uids cannot
# execute it (a pyenv under /root), but a fork needs no exec.


def in_child(who: Identity, umask: int, work: Callable[[], int]) -> int:
    """Run `work` in a forked child under `who`'s uid, gid, groups and `umask`; its result."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os._exit(in_child_body(who, umask, work))
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def connect(path: str) -> Callable[[], int]:
    def attempt() -> int:
        with socket.socket(socket.AF_UNIX) as client:
            try:
                client.connect(path)
            except PermissionError:
                return CONNECT_DENIED
            return CONNECTED

    return attempt


@contextmanager
def vllm_listening(who: Identity, umask: int, path: str) -> Iterator[None]:
    """A child under vLLM's identity binds `path` as vLLM does and listens until told to stop."""
    ready_read, ready_write = os.pipe()
    stop_read, stop_write = os.pipe()

    def serve() -> int:
        server = socket.socket(family=socket.AF_UNIX, type=socket.SOCK_STREAM)
        server.bind(path)  # vLLM 0.33's create_server_unix_socket
        server.listen()
        os.write(ready_write, b"1")
        os.read(stop_read, 1)
        return 0

    pid = os.fork()
    if pid == 0:
        os._exit(in_child_body(who, umask, serve))
    os.close(ready_write)  # so a child that died before binding reads as b"", not a hang
    os.close(stop_read)
    try:
        assert os.read(ready_read, 1) == b"1", "the vLLM stand-in did not bind"
        yield
    finally:
        os.write(stop_write, b"1")
        os.waitpid(pid, 0)
        os.close(ready_read)
        os.close(stop_write)


def in_child_body(who: Identity, umask: int, work: Callable[[], int]) -> int:
    try:
        os.setgroups(sorted(who.groups))
        os.setgid(who.gid)
        os.setuid(who.uid)
        os.umask(umask)
        return work()
    except BaseException:
        return 99


CONNECTED, CONNECT_DENIED = 0, 13


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uids needs root")
def test_the_gateways_uid_connects_to_the_socket_vllms_uid_binds(base: Rendered) -> None:
    vllm, gateway = pod_identity(base, VLLM_CONTAINER), pod_identity(base, GATEWAY_CONTAINER)
    stranger = Identity(gateway.uid + 1, gateway.gid + 1, frozenset())
    fs_group = base.pod["securityContext"]["fsGroup"]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        # The emptyDir as kubelet makes it with an fsGroup: group-owned, setgid, world-writable.
        os.chown(folder, 0, fs_group)
        folder.chmod(0o2777)
        path = str(folder / "vllm.sock")
        with vllm_listening(vllm, vllm_umask(base), path):
            stat = os.stat(path)
            assert (stat.st_uid, stat.st_gid) == (vllm.uid, fs_group)
            assert stat.st_mode & 0o777 == socket_mode(vllm_umask(base))
            assert in_child(gateway, 0o022, connect(path)) == CONNECTED
            assert in_child(stranger, 0o022, connect(path)) == CONNECT_DENIED


# --- vLLM's own probes: its /health over the socket -------------------------------------------


async def probe_exit_code(command: list[str]) -> int:
    process = await asyncio.create_subprocess_exec(*command, stderr=asyncio.subprocess.DEVNULL)
    return await process.wait()


async def test_vllms_probe_command_asks_its_health_over_the_socket(
    base: Rendered, tmp_path: Path
) -> None:
    vllm = base.container(VLLM_CONTAINER)
    command = vllm["livenessProbe"]["exec"]["command"]
    assert vllm["startupProbe"]["exec"]["command"] == command
    uds = shlex.split(vllm["args"][0])
    socket_path = uds[uds.index("--uds") + 1]
    assert command[0] == "python3" and socket_path in command[-1]
    local = str(tmp_path / "vllm.sock")
    runnable = [sys.executable, *command[1:-1], command[-1].replace(socket_path, local)]
    stub = create_stub_app(None)
    runner = web.AppRunner(stub, access_log=None)
    await runner.setup()
    await web.UnixSite(runner, local).start()
    try:
        assert await probe_exit_code(runnable) == 0
        stub[stub_state_key].health_status = 503  # vLLM's answer once its engine died
        assert await probe_exit_code(runnable) == 1
    finally:
        await runner.cleanup()
    assert await probe_exit_code(runnable) == 1  # nothing listening
