"""Where an audio path may point: containment after `..` and symlinks, no existence leak,
regular files only, and never a blocking open."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gateway.audio.samples import write_tone
from gateway.stub_upstream import StubState
from tests.conftest import chat_body, forwarded_json, gateway_error, sha256_of

CHAT = "/v1/chat/completions"
PROMPTLY_SECONDS = 5.0


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A real audio file next to, but outside, the audio root."""
    return write_tone(tmp_path / "outside.wav", 0.2, 300.0)


async def forbidden(gateway, given: str, key: str = "audio_path") -> dict[str, str]:
    value: str | list[str] = given if key == "audio_path" else [given]
    response = await gateway.post(CHAT, json=chat_body({key: value}))
    error = await gateway_error(response, 403, f"metadata.{key}")
    assert f"metadata.{key}" in error["message"]
    assert repr(given) in error["message"]
    return error


async def test_dotdot_escaping_the_root_is_403(gateway, stub: StubState, outside: Path) -> None:
    await forbidden(gateway, "../outside.wav")
    await forbidden(gateway, "sub/../../outside.wav")
    await forbidden(gateway, "../outside.wav", key="audio_paths")
    assert stub.request_count == 0


async def test_dotdot_staying_inside_the_root_is_fine(gateway, audio_dir: Path) -> None:
    (audio_dir / "sub").mkdir()
    response = await gateway.post(
        CHAT, json=chat_body({"audio_paths": ["sub/../a.wav", "./b.wav", f"{audio_dir}/./c.wav"]})
    )
    assert response.status == 200, await response.text()
    assert [clip["sha256"] for clip in (await response.json())["stub"]["clips"]] == [
        sha256_of(audio_dir / name) for name in ("a.wav", "b.wav", "c.wav")
    ]


async def test_symlink_inside_root_pointing_outside_is_403(
    gateway, stub: StubState, audio_dir: Path, outside: Path, tmp_path: Path
) -> None:
    (audio_dir / "link.wav").symlink_to(outside)
    await forbidden(gateway, "link.wav")
    await forbidden(gateway, str(audio_dir / "link.wav"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write_tone(elsewhere / "x.wav", 0.1)
    (audio_dir / "escape").symlink_to(elsewhere, target_is_directory=True)
    await forbidden(gateway, "escape/x.wav")
    assert stub.request_count == 0


async def test_absolute_path_outside_is_403(gateway, stub: StubState, outside: Path) -> None:
    await forbidden(gateway, str(outside))
    await forbidden(gateway, "/etc/passwd.wav")
    assert stub.request_count == 0


async def test_sibling_directory_sharing_the_root_prefix_is_403(
    gateway, stub: StubState, audio_dir: Path
) -> None:
    sibling = audio_dir.parent / (
        audio_dir.name + "-evil"
    )  # ".../audio-evil" starts with ".../audio"
    sibling.mkdir()
    write_tone(sibling / "a.wav", 0.1)
    await forbidden(gateway, str(sibling / "a.wav"))
    await forbidden(gateway, f"../{sibling.name}/a.wav")
    assert stub.request_count == 0


async def test_403_does_not_reveal_whether_the_file_exists(
    gateway, stub: StubState, outside: Path, tmp_path: Path
) -> None:
    existing = await forbidden(gateway, "../outside.wav")
    missing = await forbidden(gateway, "../missing.wav")
    deep_missing = await forbidden(gateway, "../no/such/dir/missing.wav")
    absolute_existing = await forbidden(gateway, str(outside))
    absolute_missing = await forbidden(gateway, str(tmp_path / "missing.wav"))

    def shape(error: dict[str, str], given: str) -> dict[str, str]:
        return {**error, "message": error["message"].replace(repr(given), "<path>")}

    reference = shape(existing, "../outside.wav")
    assert shape(missing, "../missing.wav") == reference
    assert shape(deep_missing, "../no/such/dir/missing.wav") == reference
    assert shape(absolute_existing, str(outside)) == reference
    assert shape(absolute_missing, str(tmp_path / "missing.wav")) == reference
    assert stub.request_count == 0


async def test_absolute_path_inside_allowed_roots_is_fine(
    make_gateway, stub: StubState, audio_dir: Path, tmp_path: Path
) -> None:
    library = tmp_path / "library"
    library.mkdir()
    clip = write_tone(library / "lib.wav", 0.3, 550.0)
    gateway = await make_gateway(audio={"allowed_roots": [str(library), str(audio_dir)]})
    response = await gateway.post(
        CHAT, json=chat_body({"audio_paths": [str(clip), "a.wav", str(audio_dir / "b.wav")]})
    )
    assert response.status == 200, await response.text()
    assert [c["sha256"] for c in (await response.json())["stub"]["clips"]] == [
        sha256_of(clip),
        sha256_of(audio_dir / "a.wav"),
        sha256_of(audio_dir / "b.wav"),
    ]


async def test_allowed_roots_replace_the_default_root(
    make_gateway, stub: StubState, audio_dir: Path, tmp_path: Path
) -> None:
    library = tmp_path / "library"
    library.mkdir()
    gateway = await make_gateway(audio={"allowed_roots": [str(library)]})
    # `a.wav` still resolves against root, but root is no longer an allowed root.
    await forbidden(gateway, "a.wav")
    await forbidden(gateway, str(audio_dir / "a.wav"))
    assert stub.request_count == 0


async def test_relative_path_refused_when_root_is_empty(
    make_gateway, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(audio={"root": "", "allowed_roots": [str(audio_dir)]})
    response = await gateway.post(CHAT, json=chat_body({"audio_paths": ["b.wav"]}))
    error = await gateway_error(response, 400, "metadata.audio_paths")
    assert "metadata.audio_paths[0]" in error["message"]
    assert "'b.wav'" in error["message"]
    ok = await gateway.post(CHAT, json=chat_body({"audio_path": str(audio_dir / "b.wav")}))
    assert ok.status == 200, await ok.text()
    assert (await ok.json())["stub"]["clips"][0]["sha256"] == sha256_of(audio_dir / "b.wav")
    assert stub.request_count == 1


async def test_no_root_and_no_allowed_roots_accepts_no_path(
    make_gateway, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(audio={"root": ""})
    await forbidden(gateway, str(audio_dir / "a.wav"))
    await forbidden(gateway, "/etc/hosts.wav")
    assert stub.request_count == 0


async def test_symlinked_root_works(
    make_gateway, stub: StubState, audio_dir: Path, tmp_path: Path
) -> None:
    link = tmp_path / "root-link"
    link.symlink_to(audio_dir, target_is_directory=True)
    gateway = await make_gateway(audio={"root": str(link)})
    response = await gateway.post(
        CHAT,
        json=chat_body({"audio_paths": ["a.wav", str(link / "b.wav"), str(audio_dir / "c.wav")]}),
    )
    assert response.status == 200, await response.text()
    assert [c["sha256"] for c in (await response.json())["stub"]["clips"]] == [
        sha256_of(audio_dir / name) for name in ("a.wav", "b.wav", "c.wav")
    ]


async def test_fifo_is_400_and_never_blocks(gateway, stub: StubState, audio_dir: Path) -> None:
    os.mkfifo(audio_dir / "pipe.wav")  # nobody ever writes: an open() for reading would hang
    for metadata, param in [
        ({"audio_path": "pipe.wav"}, "metadata.audio_path"),
        ({"audio_paths": ["a.wav", "pipe.wav"]}, "metadata.audio_paths"),
    ]:
        response = await asyncio.wait_for(
            gateway.post(CHAT, json=chat_body(metadata)), PROMPTLY_SECONDS
        )
        error = await gateway_error(response, 400, param)
        assert "'pipe.wav'" in error["message"]
        assert "regular file" in error["message"]
    assert stub.request_count == 0


async def test_symlink_to_fifo_is_400_and_never_blocks(
    gateway, stub: StubState, audio_dir: Path
) -> None:
    os.mkfifo(audio_dir / "pipe")
    (audio_dir / "pipe-link.wav").symlink_to(audio_dir / "pipe")
    response = await asyncio.wait_for(
        gateway.post(CHAT, json=chat_body({"audio_path": "pipe-link.wav"})), PROMPTLY_SECONDS
    )
    error = await gateway_error(response, 400, "metadata.audio_path")
    assert "regular file" in error["message"]
    assert stub.request_count == 0


async def test_directory_is_400(gateway, stub: StubState, audio_dir: Path) -> None:
    (audio_dir / "folder.wav").mkdir()
    for given in ["folder.wav", str(audio_dir / "folder.wav")]:
        response = await gateway.post(CHAT, json=chat_body({"audio_path": given}))
        error = await gateway_error(response, 400, "metadata.audio_path")
        assert repr(given) in error["message"]
        assert "regular file" in error["message"]
    assert stub.request_count == 0


async def test_device_is_400(make_gateway, stub: StubState, audio_dir: Path) -> None:
    gateway = await make_gateway(audio={"allowed_roots": [str(audio_dir), "/dev"]})
    (audio_dir / "zero.wav").symlink_to("/dev/zero")  # reading it would never end
    response = await asyncio.wait_for(
        gateway.post(CHAT, json=chat_body({"audio_path": "zero.wav"})), PROMPTLY_SECONDS
    )
    error = await gateway_error(response, 400, "metadata.audio_path")
    assert "regular file" in error["message"]
    assert stub.request_count == 0


async def test_symlink_inside_root_to_a_file_inside_root_is_fine(
    gateway, stub: StubState, audio_dir: Path
) -> None:
    (audio_dir / "alias.wav").symlink_to(audio_dir / "c.wav")
    (audio_dir / "sub").mkdir()
    (audio_dir / "sub" / "relative-alias.wav").symlink_to("../b.wav")
    response = await gateway.post(
        CHAT, json=chat_body({"audio_paths": ["alias.wav", "sub/relative-alias.wav"]})
    )
    assert response.status == 200, await response.text()
    assert [c["sha256"] for c in (await response.json())["stub"]["clips"]] == [
        sha256_of(audio_dir / "c.wav"),
        sha256_of(audio_dir / "b.wav"),
    ]
    assert "metadata" not in forwarded_json(stub)
