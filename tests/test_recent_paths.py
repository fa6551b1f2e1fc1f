"""Paths checked moments ago (`gateway/audio/recent.py`): a request within the window is
re-checked with one stat, and a clip changed on disk in between is never sent stale, nor a
path re-pointed out of the roots served."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from hypothesis import given
from hypothesis import strategies as st

from gateway.audio.policy import PathPolicy
from gateway.audio.recent import RecentPaths, _mount_types, _type_of
from gateway.audio.samples import write_tone
from gateway.naming.sidechannel import PathAudio
from tests.conftest import GatewayFactory, chat_body, gateway_error, sha256_of

Client = TestClient[web.Request, web.Application]


async def heard(client: Client, metadata: dict[str, Any]) -> list[str]:
    """The sha256 of each clip the stub decoded for one request."""
    response = await client.post("/v1/chat/completions", json=chat_body(metadata))
    assert response.status == 200, await response.text()
    return [clip["sha256"] for clip in (await response.json())["stub"]["clips"]]


def same_times(path: Path, like: os.stat_result) -> None:
    """Give `path` the size-independent times of `like`: only ctime and inode can tell."""
    os.utime(path, ns=(like.st_atime_ns, like.st_mtime_ns))


@pytest.fixture
async def gateway(make_gateway: GatewayFactory) -> Client:
    return await make_gateway()


class TestChangedOnDisk:
    """Each change happens between two requests a few milliseconds apart: inside the window."""

    async def test_replaced_by_rename_with_the_same_size_and_mtime(
        self, gateway: Client, audio_dir: Path
    ) -> None:
        clip = audio_dir / "a.wav"
        assert await heard(gateway, {"audio_path": "a.wav"}) == [sha256_of(clip)]
        old = clip.stat()
        fresh = write_tone(audio_dir / "fresh.tmp.wav", 0.25, 1234.0)
        assert fresh.stat().st_size == old.st_size
        same_times(fresh, old)
        os.replace(fresh, clip)
        assert await heard(gateway, {"audio_path": "a.wav"}) == [sha256_of(clip)]

    async def test_rewritten_in_place_with_its_mtime_put_back(
        self, gateway: Client, audio_dir: Path
    ) -> None:
        clip = audio_dir / "a.wav"
        old_sha = sha256_of(clip)
        assert await heard(gateway, {"audio_path": "a.wav"}) == [old_sha]
        old = clip.stat()
        data = bytearray(clip.read_bytes())
        data[-100:] = bytes(100)  # same size, other samples
        with open(clip, "r+b") as handle:
            handle.write(data)
        same_times(clip, old)
        assert clip.stat().st_mtime_ns == old.st_mtime_ns and sha256_of(clip) != old_sha
        assert await heard(gateway, {"audio_path": "a.wav"}) == [sha256_of(clip)]

    async def test_removed(self, gateway: Client, audio_dir: Path) -> None:
        await heard(gateway, {"audio_path": "a.wav"})
        (audio_dir / "a.wav").unlink()
        response = await gateway.post(
            "/v1/chat/completions", json=chat_body({"audio_path": "a.wav"})
        )
        error = await gateway_error(response, 404, "metadata.audio_path")
        assert error["code"] == "audio_not_found"

    async def test_a_symlink_swapped_to_another_clip(
        self, gateway: Client, audio_dir: Path
    ) -> None:
        link = audio_dir / "link.wav"
        link.symlink_to(audio_dir / "a.wav")
        assert await heard(gateway, {"audio_path": "link.wav"}) == [sha256_of(audio_dir / "a.wav")]
        swap(link, audio_dir / "b.wav")
        assert await heard(gateway, {"audio_path": "link.wav"}) == [sha256_of(audio_dir / "b.wav")]


def swap(link: Path, target: Path) -> None:
    """Point `link` at `target` atomically, as a deploy script would."""
    staged = link.with_name(link.name + ".new")
    staged.symlink_to(target)
    os.replace(staged, link)


class TestOutOfTheRoots:
    async def test_a_symlink_swapped_out_of_the_roots(
        self, gateway: Client, audio_dir: Path, tmp_path: Path
    ) -> None:
        outside = write_tone(tmp_path / "outside.wav", 0.25, 300.0)
        link = audio_dir / "link.wav"
        link.symlink_to(audio_dir / "a.wav")
        await heard(gateway, {"audio_path": "link.wav"})
        swap(link, outside)
        response = await gateway.post(
            "/v1/chat/completions", json=chat_body({"audio_path": "link.wav"})
        )
        error = await gateway_error(response, 403, "metadata.audio_path")
        assert error["code"] == "audio_path_forbidden"

    async def test_swapped_to_a_hard_link_of_the_same_file_outside(
        self, gateway: Client, audio_dir: Path, tmp_path: Path
    ) -> None:
        """The same inode under a name outside the roots: a full check answers it (403), as
        the file has two names now."""
        link = audio_dir / "link.wav"
        link.symlink_to(audio_dir / "a.wav")
        await heard(gateway, {"audio_path": "link.wav"})
        os.link(audio_dir / "a.wav", tmp_path / "same.wav")
        swap(link, tmp_path / "same.wav")
        response = await gateway.post(
            "/v1/chat/completions", json=chat_body({"audio_path": "link.wav"})
        )
        error = await gateway_error(response, 403, "metadata.audio_path")
        assert error["code"] == "audio_path_forbidden"

    async def test_a_directory_on_the_way_swapped_out(
        self, gateway: Client, audio_dir: Path, tmp_path: Path
    ) -> None:
        (tmp_path / "elsewhere").mkdir()
        write_tone(tmp_path / "elsewhere" / "a.wav", 0.25, 440.0)  # the same bytes, outside
        hop = audio_dir / "hop"
        hop.symlink_to(audio_dir)
        await heard(gateway, {"audio_path": "hop/a.wav"})
        swap(hop, tmp_path / "elsewhere")
        response = await gateway.post(
            "/v1/chat/completions", json=chat_body({"audio_path": "hop/a.wav"})
        )
        await gateway_error(response, 403, "metadata.audio_path")


# --- RecentPaths itself ---------------------------------------------------------------------------


def ref(given: str) -> PathAudio:
    return PathAudio(given, "metadata.audio_path", "metadata.audio_path")


@pytest.fixture
def policy(audio_dir: Path) -> PathPolicy:
    return PathPolicy(str(audio_dir), [os.path.realpath(audio_dir)], 10**9)


def test_a_path_is_rechecked_within_its_window(policy: PathPolicy) -> None:
    recent = RecentPaths(policy, window_seconds=60)
    assert recent.recheck([ref("a.wav")]) is None
    checked = policy.resolve(ref("a.wav"))
    recent.remember([checked], checked_at=time.monotonic())
    again = recent.recheck([ref("a.wav"), ref("a.wav")])
    assert again == [checked, checked]
    assert recent.recheck([ref("a.wav"), ref("b.wav")]) is None  # all or nothing


def test_the_window_closes(policy: PathPolicy) -> None:
    recent = RecentPaths(policy, window_seconds=0.0)
    recent.remember([policy.resolve(ref("a.wav"))], checked_at=time.monotonic() - 1)
    assert recent.recheck([ref("a.wav")]) is None


def test_rules_run_again_on_every_recheck(policy: PathPolicy, audio_dir: Path) -> None:
    """The size limit and the request's own names come from this request, not the last one."""
    recent = RecentPaths(policy, window_seconds=60)
    recent.remember([policy.resolve(ref("a.wav"))], checked_at=time.monotonic())
    other = PathAudio("a.wav", "metadata.audio_paths", "metadata.audio_paths[1]")
    (clip,) = recent.recheck([other]) or []
    assert clip.ref == other
    policy.max_file_bytes = 10
    with pytest.raises(Exception, match=r"audio\.max_file_bytes"):
        recent.recheck([ref("a.wav")])


def test_a_file_with_two_names_is_not_remembered(policy: PathPolicy, audio_dir: Path) -> None:
    os.link(audio_dir / "a.wav", audio_dir / "twin.wav")
    recent = RecentPaths(policy, window_seconds=60)
    recent.remember([policy.resolve(ref("a.wav"))], checked_at=time.monotonic())
    assert recent.recheck([ref("a.wav")]) is None


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:26 / /data rw,relatime shared:5 - nfs4 server:/export rw
31 30 8:2 / /data/local rw,relatime shared:6 - xfs /dev/sdb1 rw
32 22 0:27 / /mnt/with\\040space rw - tmpfs tmpfs rw
"""


def test_the_file_system_of_a_path(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    table.write_text(MOUNTINFO)
    mounts = _mount_types(str(table))
    assert _type_of("/srv/audio", mounts) == "ext4"
    assert _type_of("/data/clips/a.wav", mounts) == "nfs4"
    assert _type_of("/data/local/a.wav", mounts) == "xfs"
    assert _type_of("/data/localnot", mounts) == "nfs4"
    assert _type_of("/mnt/with space/a.wav", mounts) == "tmpfs"


def test_roots_on_a_network_file_system_keep_every_check_on_the_workers(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    table.write_text(MOUNTINFO)

    def recent(*roots: str) -> RecentPaths | None:
        return RecentPaths.for_policy(PathPolicy("", roots, 1), mountinfo=str(table))

    assert recent("/data/clips") is None
    assert recent("/data/local", "/srv") is not None
    assert recent("/data/local", "/data/x") is None
    assert recent() is None  # no local root at all (objects only): nothing to re-check


@given(st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\n"), min_size=1))
def test_escaped_mount_points_read_back(name: str) -> None:
    point = "/" + name.replace("/", "_")
    escaped = "".join(f"\\{ord(c):03o}" if c in " \t\\" else c for c in point)
    line = f"40 22 0:30 / {escaped} rw - tmpfs tmpfs rw\n"
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", delete=False) as handle:
        handle.write(line)
    try:
        assert _mount_types(handle.name) == [(point, "tmpfs")]
    finally:
        os.unlink(handle.name)
