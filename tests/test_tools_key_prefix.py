"""The dataset tools under `[sidechannel] key_prefix`, and `convert --to-key-prefix P`.

`check` and `convert` read the sidechannel under the config's prefix; `--to-key-prefix P`
writes it under P (alone, or with `--extract-to` / `--inline`), and going back to "" gives the
rows back byte for byte.
"""

from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.audio.samples import write_tone
from gateway.errors import InvalidRequest
from gateway.naming.sidechannel import SIDECHANNEL_KEYS, SidechannelKeys
from gateway.tools.prefix import KeyRenaming
from tests.tools_helpers import data_uri, read_jsonl, run_json, run_tool

GYM = "responses_create_params"
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt "  # only ever parsed, never decoded, by the renaming


def config_file(directory: Path, prefix: str) -> str:
    path = directory / f"prefix-{len(prefix)}-{abs(hash(prefix))}.toml"
    path.write_text(f"[sidechannel]\nkey_prefix = {json.dumps(prefix)}\n")
    return str(path)


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Rows as msgspec writes them (compact, key order kept): what `convert` writes back."""
    path.write_bytes(b"".join(msgspec.json.encode(row) + b"\n" for row in rows))
    return path


def gym_row(metadata: dict[str, Any], answer: str = "hi") -> dict[str, Any]:
    request = {"model": "m", "input": [{"role": "user", "content": "Transcribe."}]}
    return {GYM: {**request, "metadata": metadata}, "expected_answer": answer, "id": 7}


# --- the pure renaming ------------------------------------------------------------------------

prefixes = st.from_regex(r"[A-Za-z0-9_.-]{0,10}", fullmatch=True)
sidechannel_values = {
    "audio_data": st.just(data_uri(WAV)),
    "audio_url": st.just(data_uri(WAV)),
    "audio_path": st.sampled_from(["a.wav", "dir/b.flac", "/abs/c.mp3"]),
    "audio_paths": st.sampled_from([["a.wav", "b.wav"], '["a.wav", "c.ogg"]']),
}
ordinary = st.dictionaries(
    st.sampled_from(["trace_id", "seed", "audio", "audio_pathz", "note"]), st.text(max_size=4)
)


@st.composite
def plain_metadata(draw: st.DrawFn) -> dict[str, Any]:
    """Metadata under the plain keys: ordinary keys and at most one sidechannel key, anywhere."""
    items = list(draw(ordinary).items())
    if draw(st.booleans()):
        kind = draw(st.sampled_from(SIDECHANNEL_KEYS))
        items.insert(draw(st.integers(0, len(items))), (kind, draw(sidechannel_values[kind])))
    return dict(items)


def renamed_request(request: dict[str, Any], source: str, target: str) -> dict[str, Any]:
    renaming = KeyRenaming(SidechannelKeys(source), SidechannelKeys(target))
    sidechannel = renaming.source.read(request, 16, 2**20)
    renaming.check(request, sidechannel)
    return request if sidechannel is None else renaming.renamed(request, sidechannel)


@given(plain_metadata(), prefixes)
def test_renaming_there_and_back_gives_the_request_back(
    metadata: dict[str, Any], prefix: str
) -> None:
    request = {"model": "m", "metadata": metadata}
    there = renamed_request(request, "", prefix)
    back = renamed_request(there, prefix, "")
    assert msgspec.json.encode(back) == msgspec.json.encode(request)  # key order too
    # Under P the renamed request holds the same clips, named as sent.
    original = SidechannelKeys().read(request, 16, 2**20)
    moved = SidechannelKeys(prefix).read(there, 16, 2**20)
    assert (original is None) == (moved is None)
    if original is not None and moved is not None:
        assert moved.key == prefix + original.key
        assert [c.given for c in moved.clips] == [c.given for c in original.clips]
        others = {k: v for k, v in metadata.items() if k != original.key}
        assert {k: v for k, v in there["metadata"].items() if k != moved.key} == others


@given(plain_metadata(), prefixes.filter(bool), st.sampled_from(SIDECHANNEL_KEYS))
def test_a_key_that_would_change_meaning_is_refused(
    metadata: dict[str, Any], prefix: str, kind: str
) -> None:
    # Under P the plain `kind` is ordinary metadata; going to "" would make it the sidechannel.
    request = {"metadata": {**{prefix + k: v for k, v in metadata.items()}, kind: "x"}}
    with pytest.raises(InvalidRequest) as raised:
        renamed_request(request, prefix, "")
    assert raised.value.code == "conflicting_audio_keys"
    assert raised.value.param == f"metadata.{kind}"


# --- convert --to-key-prefix, end to end -------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(plain_metadata(), min_size=1, max_size=5), prefixes, st.booleans())
def test_convert_to_a_prefix_and_back_gives_the_rows_back(
    metadatas: list[dict[str, Any]], prefix: str, nested: bool
) -> None:
    rows = [
        gym_row(m) if nested else {"model": "m", "messages": [], "metadata": m} for m in metadatas
    ]
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        source = write_rows(work / "in.jsonl", rows)
        code, there = run_json(
            "convert", str(source), str(work / "p.jsonl"), f"--to-key-prefix={prefix}"
        )
        assert code == 0, there
        with_audio = sum(any(k in m for k in SIDECHANNEL_KEYS) for m in metadatas)
        assert (there["rows_converted"], there["rows_unchanged"]) == (
            with_audio,
            len(rows) - with_audio,
        )
        assert there["direction"] == "key_prefix" and there["to_key_prefix"] == prefix
        code, back = run_json(
            "convert", str(work / "p.jsonl"), str(work / "back.jsonl"),
            "--to-key-prefix", "", "--config", config_file(work, prefix),
        )  # fmt: skip
        assert code == 0, back
        assert (work / "back.jsonl").read_bytes() == source.read_bytes()


def test_gym_rows_get_their_keys_renamed_and_nothing_else(tmp_path: Path) -> None:
    rows = [
        gym_row({"audio_paths": '["a.wav", "b.wav"]', "task": "asr"}),
        gym_row({"audio_data": data_uri(WAV)}),
        gym_row({"task": "no audio"}),
    ]
    source = write_rows(tmp_path / "in.jsonl", rows)
    code, summary = run_json(
        "convert", str(source), str(tmp_path / "out.jsonl"), "--to-key-prefix", "gateway_"
    )
    assert code == 0, summary
    assert (summary["rows_converted"], summary["rows_unchanged"], summary["clips"]) == (2, 1, 3)
    out = read_jsonl(tmp_path / "out.jsonl")
    assert out[0][GYM]["metadata"] == {"gateway_audio_paths": '["a.wav", "b.wav"]', "task": "asr"}
    assert out[1][GYM]["metadata"] == {"gateway_audio_data": data_uri(WAV)}
    assert out[2] == rows[2]
    assert [{k: v for k, v in row.items() if k != GYM} for row in out] == [
        {"expected_answer": "hi", "id": 7}
    ] * 3


def test_an_invalid_sidechannel_or_a_clash_is_a_row_error_copied_unchanged(
    tmp_path: Path,
) -> None:
    lines = [
        msgspec.json.encode(gym_row({"audio_path": "a.wav", "audio_data": data_uri(WAV)})),
        msgspec.json.encode(gym_row({"gateway_audio_path": "a.wav", "audio_path": "b.wav"})),
        msgspec.json.encode(gym_row({"gateway_audio_path": "c.wav"})),
    ]
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    config = config_file(tmp_path, "gateway_")
    out = tmp_path / "out.jsonl"
    code, summary = run_json(
        "convert", str(source), str(out), "--to-key-prefix", "", "--config", config
    )
    assert code == 1
    assert summary["rows_converted"] == 1
    examples = summary["errors"]["conflicting_audio_keys"]["examples"]
    # Under "gateway_" the plain keys are ordinary metadata; under "" they would be read.
    assert [(e["line"], e["key"]) for e in examples] == [
        (1, f"{GYM}.metadata.audio_data"),
        (2, f"{GYM}.metadata.audio_path"),
    ]
    assert examples[0]["message"].startswith("metadata.audio_data is ordinary metadata")
    assert "metadata.gateway_audio_path becomes metadata.audio_path" in examples[1]["message"]
    written = out.read_bytes().split(b"\n")
    assert written[:2] == lines[:2]  # copied unchanged
    assert json.loads(written[2])[GYM]["metadata"] == {"audio_path": "c.wav"}


@pytest.mark.parametrize("prefix", ["gateway audio", "a/b", "ß_", "x:"])
def test_a_bad_prefix_is_a_usage_error(tmp_path: Path, prefix: str) -> None:
    source = write_rows(tmp_path / "in.jsonl", [gym_row({"audio_path": "a.wav"})])
    code, _, err = run_tool(
        "convert", str(source), str(tmp_path / "o.jsonl"), f"--to-key-prefix={prefix}"
    )
    assert code == 2
    assert "--to-key-prefix" in err
    assert not (tmp_path / "o.jsonl").exists()


def test_the_usual_guarantees_hold(tmp_path: Path) -> None:
    source = write_rows(tmp_path / "in.jsonl", [gym_row({"audio_path": "a.wav"})])
    before = source.read_bytes()
    assert run_tool("convert", str(source), str(source), "--to-key-prefix", "g_")[0] == 2
    out = tmp_path / "out.jsonl"
    out.write_text("keep me\n")
    assert run_tool("convert", str(source), str(out), "--to-key-prefix", "g_")[0] == 2
    assert out.read_text() == "keep me\n"
    assert run_tool("convert", str(source), str(out), "--to-key-prefix", "g_", "--force")[0] == 0
    assert read_jsonl(out)[0][GYM]["metadata"] == {"g_audio_path": "a.wav"}
    assert source.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


# --- with --extract-to and --inline, and check ---------------------------------------------------


@pytest.fixture
def clip(tmp_path: Path) -> bytes:
    return write_tone(tmp_path / "tone.wav", 0.2, 440.0).read_bytes()


def test_extract_to_writes_paths_under_the_new_prefix(tmp_path: Path, clip: bytes) -> None:
    rows = [
        gym_row({"audio_data": data_uri(clip), "task": "asr"}),
        gym_row({"audio_path": "kept.wav"}),  # no inline audio: renamed only
    ]
    source = write_rows(tmp_path / "in.jsonl", rows)
    out, clips = tmp_path / "out.jsonl", tmp_path / "clips"
    code, summary = run_json(
        "convert", str(source), str(out), "--extract-to", str(clips), "--to-key-prefix", "gateway_"
    )
    assert code == 0, summary
    assert summary["direction"] == "extract" and summary["to_key_prefix"] == "gateway_"
    first, second = read_jsonl(out)
    written = first[GYM]["metadata"]
    assert set(written) == {"gateway_audio_path", "task"}
    assert (clips / written["gateway_audio_path"]).read_bytes() == clip
    assert second[GYM]["metadata"] == {"gateway_audio_path": "kept.wav"}
    # check reads them under the config's prefix, as serve would
    config = config_file(tmp_path, "gateway_")
    code, checked = run_json("check", str(out), "--audio-root", str(clips), "--config", config)
    assert code == 1
    assert (checked["rows_with_audio"], checked["clips"]) == (2, 1)
    (example,) = checked["errors"]["audio_not_found"]["examples"]
    assert (example["line"], example["key"], example["path"]) == (
        2,
        f"{GYM}.metadata.gateway_audio_path",
        "kept.wav",
    )
    # ... and without the prefix the rows carry no sidechannel at all
    code, plain = run_json("check", str(out), "--audio-root", str(clips))
    assert (code, plain["rows_with_audio"]) == (0, 0)


def test_check_names_the_prefixed_paths_key_and_the_path(tmp_path: Path, clip: bytes) -> None:
    (tmp_path / "a.wav").write_bytes(clip)
    rows = [gym_row({"gateway_audio_paths": '["a.wav", "gone.wav"]', "audio_path": "x.wav"})]
    source = write_rows(tmp_path / "in.jsonl", rows)
    config = config_file(tmp_path, "gateway_")
    code, checked = run_json(
        "check", str(source), "--audio-root", str(tmp_path), "--config", config
    )
    assert code == 1
    (example,) = checked["errors"]["audio_not_found"]["examples"]
    assert (example["key"], example["path"]) == (f"{GYM}.metadata.gateway_audio_paths", "gone.wav")
    assert "metadata.gateway_audio_paths[1]" in example["message"]


def test_inline_reads_under_the_config_prefix(tmp_path: Path, clip: bytes) -> None:
    (tmp_path / "a.wav").write_bytes(clip)
    chat = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    rows = [{**chat, "metadata": {"gateway_audio_path": "a.wav", "audio_path": "ordinary"}}]
    source = write_rows(tmp_path / "in.jsonl", rows)
    config = config_file(tmp_path, "gateway_")
    out = tmp_path / "out.jsonl"
    code, summary = run_json(
        "convert", str(source), str(out), "--inline", "--audio-root", str(tmp_path),
        "--config", config, "--to-key-prefix", "",
    )  # fmt: skip
    # the ordinary `audio_path` would become the sidechannel under "": refused, not lost
    assert code == 1, summary
    assert list(summary["errors"]) == ["conflicting_audio_keys"]
    code, summary = run_json(
        "convert", str(source), str(out), "--inline", "--audio-root", str(tmp_path),
        "--config", config, "--force",
    )  # fmt: skip
    assert code == 0, summary
    (row,) = read_jsonl(out)
    assert row["metadata"] == {"audio_path": "ordinary"}
    url = row["messages"][0]["content"][0]["audio_url"]["url"]
    assert base64.b64decode(url.split(",", 1)[1]) == clip
