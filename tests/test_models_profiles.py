"""Model profiles (gateway.models): the built-in table, the operator's overrides merged over a
profile, where an architecture is read (names, model directories, /v1/models cards), and
`Placement` finding, keeping and never failing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import Config, ConfigError, validate_config
from gateway.models.builtin import ARCHITECTURES, BUILTIN, PROFILES
from gateway.models.known import (
    architecture_in_config,
    architecture_in_params,
    architecture_of_name,
    root_of,
)
from gateway.models.placement import Placement, architecture_in_dir
from gateway.models.profile import ModelProfile, global_profile, resolve
from gateway.normalize.form import TargetForm, in_form

VOXTRAL = "VoxtralForConditionalGeneration"
AF3 = "AudioFlamingo3ForConditionalGeneration"

OVERRIDES = st.fixed_dictionaries(
    {},
    optional={
        "window_seconds": st.floats(0.5, 3600),
        "max_clip_seconds": st.one_of(st.just(0), st.floats(0.5, 3600)),
        "clips_per_prompt": st.integers(1, 64),
        "sample_rate": st.integers(8_000, 192_000),
        "accepts_stereo": st.booleans(),
        "accepts_uuid_only_parts": st.booleans(),
        "chat": st.booleans(),
        "transcriptions": st.booleans(),
        "translations": st.sampled_from(["translates", "english", "transcribes", "none"]),
    },
)

JSON_KEYS = st.sampled_from(["id", "data", "root", "parent", "architectures", "multimodal"])


def json_like(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=4) | st.dictionaries(JSON_KEYS, children, max_size=4)


def config_with(name: str, table: dict[str, Any], **sections: Any) -> Config:
    return validate_config({"models": {name: table}, **sections})


class TestBuiltIn:
    def test_the_issue_table(self) -> None:
        voxtral = PROFILES[VOXTRAL]
        assert (voxtral.clips_per_prompt, voxtral.max_clip_seconds) == (5, None)
        assert not voxtral.accepts_stereo and not voxtral.accepts_uuid_only_parts
        assert voxtral.translations == "transcribes"
        assert PROFILES["Qwen2AudioForConditionalGeneration"].max_clip_seconds == 30
        assert PROFILES[AF3].max_clip_seconds == 600 and PROFILES[AF3].clips_per_prompt == 1
        assert PROFILES["GlmAsrForConditionalGeneration"].max_clip_seconds == 655
        assert PROFILES["FunAudioChatForConditionalGeneration"].max_clip_seconds == 300
        assert PROFILES["MiMoV2OmniForCausalLM"].sample_rate == 24_000
        whisper = PROFILES["WhisperForConditionalGeneration"]
        assert not whisper.chat and whisper.translations == "english"
        assert {a.name for a in ARCHITECTURES if a.run_here} == {
            "Qwen2-Audio",
            "Whisper",
            "Voxtral",
            "Audio Flamingo 3",
            "GLM-ASR",
        }

    def test_every_entry_is_consistent(self) -> None:
        assert len(BUILTIN) == len(ARCHITECTURES)  # one entry per architecture
        for entry in ARCHITECTURES:
            profile = entry.profile
            if profile.max_clip_seconds is not None and profile.window_seconds is not None:
                assert profile.max_clip_seconds >= profile.window_seconds, entry
            assert profile.transcriptions == (profile.translations != "none"), entry
            assert profile.sample_rate in (16_000, 24_000)


class TestResolve:
    def test_a_placed_model_gets_its_profile_and_pieces_its_maximum(self) -> None:
        rules = resolve("af3", Config(), (AF3, "config"), PROFILES)
        assert rules.placed and rules.profile == PROFILES[AF3]
        assert rules.piece_seconds == 600

    def test_an_unplaced_model_gets_the_global_settings(self) -> None:
        config = validate_config({"chunking": {"threshold_seconds": 20, "max_chunk_seconds": 15}})
        rules = resolve("mine", config, None, PROFILES)
        assert not rules.placed and rules.architecture == "" and rules.placed_by == ""
        assert rules.profile == global_profile(config.chunking, config.normalize)
        assert (rules.profile.max_clip_seconds, rules.piece_seconds) == (20, 15)

    def test_an_architecture_without_a_profile_is_not_placed(self) -> None:
        rules = resolve("x", Config(), ("NoSuchForConditionalGeneration", "config"), PROFILES)
        assert not rules.placed

    def test_max_clip_seconds_zero_is_no_maximum(self) -> None:
        config = config_with("af3", {"architecture": AF3, "max_clip_seconds": 0})
        rules = resolve("af3", config, (AF3, "config"), PROFILES)
        assert rules.profile.max_clip_seconds is None and rules.piece_seconds is None

    @given(
        architecture=st.sampled_from([*PROFILES, "Unknown"]),
        overrides=OVERRIDES,
        placed=st.booleans(),
    )
    def test_overrides_replace_exactly_their_keys(
        self, architecture: str, overrides: dict[str, Any], placed: bool
    ) -> None:
        config = config_with("m", overrides)
        found = (architecture, "config") if placed else None
        rules = resolve("m", config, found, PROFILES)
        base = PROFILES.get(architecture) if placed else None
        if base is None:
            base = global_profile(config.chunking, config.normalize)
        for field in dataclasses.fields(ModelProfile):
            got = getattr(rules.profile, field.name)
            if field.name in overrides:
                want = overrides[field.name]
                assert got == (None if field.name == "max_clip_seconds" and want == 0 else want)
            else:
                assert got == getattr(base, field.name)
        assert rules.placed == (placed and architecture in PROFILES)
        if rules.placed or "max_clip_seconds" in overrides:
            assert rules.piece_seconds == rules.profile.max_clip_seconds
        else:
            assert rules.piece_seconds == config.chunking.max_chunk_seconds


class TestBadConfig:
    @pytest.mark.parametrize(
        ("table", "key", "reason"),
        [
            ({"window_seconds": -1}, "window_seconds", "greater than 0"),
            ({"window_seconds": 0}, "window_seconds", "greater than 0"),
            ({"max_clip_seconds": -30}, "max_clip_seconds", "greater than or equal to 0"),
            ({"clips_per_prompt": 0}, "clips_per_prompt", "greater than or equal to 1"),
            ({"clips_per_prompt": 1.5}, "clips_per_prompt", "integer"),
            ({"sample_rate": 100}, "sample_rate", "8000"),
            ({"translations": "yes"}, "translations", "'translates'"),
            ({"accepts_stereo": "no"}, "accepts_stereo", "boolean"),
            ({"window": 30}, "window", "unknown key"),
        ],
    )
    def test_a_bad_value_names_the_key(self, table: dict[str, Any], key: str, reason: str) -> None:
        with pytest.raises(ConfigError) as raised:
            validate_config({"models": {"voxtral": {"architecture": VOXTRAL, **table}}})
        message = str(raised.value)
        assert f'models."voxtral".{key}: ' in message
        assert reason in message.split(f'models."voxtral".{key}: ', 1)[1]

    def test_placement_retry_must_be_positive(self) -> None:
        with pytest.raises(ConfigError, match=r"placement\.retry_seconds: "):
            validate_config({"placement": {"retry_seconds": 0}})


class TestKnown:
    @pytest.mark.parametrize(
        ("name", "architecture"),
        [
            ("mistralai/Voxtral-Mini-3B-2507", VOXTRAL),
            ("mistralai/Voxtral-Mini-4B-Realtime-2602", "VoxtralRealtimeGeneration"),
            ("Qwen/Qwen2-Audio-7B-Instruct", "Qwen2AudioForConditionalGeneration"),
            ("/models/qwen2.5-omni-7b", "Qwen2_5OmniForConditionalGeneration"),
            ("nvidia/audio-flamingo-3-hf", AF3),
            ("zai-org/GLM-ASR-Nano-2512", "GlmAsrForConditionalGeneration"),
            ("openai/whisper-large-v3-turbo", "WhisperForConditionalGeneration"),
            ("google/gemma-3n-E4B-it", "Gemma3nForConditionalGeneration"),
            ("ibm-granite/granite-speech-3.3-8b", "GraniteSpeechForConditionalGeneration"),
            ("moonshotai/Kimi-Audio-7B-Instruct", "MoonshotKimiaForCausalLM"),
            ("stub-audio-model", None),
            ("voxtral-team/llama-3-8b", None),  # only the last part counts
        ],
    )
    def test_names(self, name: str, architecture: str | None) -> None:
        assert architecture_of_name(name) == architecture

    @given(org=st.text(max_size=12), name=st.text(max_size=24))
    def test_any_name_places_a_profiled_architecture_or_none(self, org: str, name: str) -> None:
        found = architecture_of_name(f"{org}/{name}")
        assert found is None or found in PROFILES
        # only the last path part counts: the organisation never places a model
        assert architecture_of_name(f"{name}/stub-audio-model") is None

    def test_config_json_prefers_an_architecture_with_a_profile(self) -> None:
        data = {"architectures": ["SomethingElse", AF3]}
        assert architecture_in_config(data, PROFILES) == AF3
        assert architecture_in_config({"architectures": ["Other"]}, PROFILES) == "Other"
        assert architecture_in_config({"architectures": "x"}, PROFILES) is None

    def test_params_json_is_voxtral_or_realtime(self) -> None:
        encoder: dict[str, Any] = {"dim": 64}
        params = {"multimodal": {"whisper_model_args": {"encoder_args": encoder}}}
        assert architecture_in_params(params) == VOXTRAL
        encoder["causal"] = True
        assert architecture_in_params(params) == "VoxtralRealtimeGeneration"
        assert architecture_in_params({"dim": 4096}) is None

    def test_root_of_a_card_and_of_a_lora_adapter(self) -> None:
        cards = {
            "object": "list",
            "data": [
                {"id": "base", "root": "/models/Voxtral-Mini", "parent": None},
                {"id": "adapter", "root": "/loras/a", "parent": "base"},
                {"id": "bare"},
            ],
        }
        assert root_of(cards, "base") == "/models/Voxtral-Mini"
        assert root_of(cards, "adapter") == "/models/Voxtral-Mini"
        assert root_of(cards, "bare") is None and root_of(cards, "absent") is None

    @given(st.recursive(st.none() | st.booleans() | st.text(), json_like, max_leaves=8))
    def test_any_json_is_read_without_error(self, data: Any) -> None:
        root_of(data, "m")
        architecture_in_config(data, PROFILES)
        architecture_in_params(data)

    def test_a_model_directory(self, tmp_path: Path) -> None:
        (tmp_path / "config.json").write_text(json.dumps({"architectures": [AF3]}))
        assert architecture_in_dir(str(tmp_path)) == AF3
        mistral = tmp_path / "mistral"
        mistral.mkdir()
        (mistral / "config.json").write_text("{not json")
        params = {"multimodal": {"whisper_model_args": {"encoder_args": {}}}}
        (mistral / "params.json").write_text(json.dumps(params))
        assert architecture_in_dir(str(mistral)) == VOXTRAL
        assert architecture_in_dir(str(tmp_path / "absent")) is None

    def test_only_regular_files_are_read_in_a_model_directory(self, tmp_path: Path) -> None:
        # A FIFO named config.json would block a plain open() until a writer came: it is
        # passed over, and so is a directory; params.json beside them still places the model.
        os.mkfifo(tmp_path / "config.json")
        (tmp_path / "params.json").mkdir()
        assert architecture_in_dir(str(tmp_path)) is None
        (tmp_path / "params.json").rmdir()
        params = {"multimodal": {"whisper_model_args": {"encoder_args": {}}}}
        (tmp_path / "params.json").write_text(json.dumps(params))
        assert architecture_in_dir(str(tmp_path)) == VOXTRAL
        big = tmp_path / "big"
        big.mkdir()
        (big / "config.json").write_text(json.dumps({"architectures": [AF3], "x": "y" * 2**20}))
        assert architecture_in_dir(str(big)) is None  # over the size a model file may have


class Upstream:
    """A /v1/models answer the placement fetches (counted), or a failure."""

    def __init__(self, cards: Any = None, error: Exception | None = None) -> None:
        self.cards, self.error, self.asked = cards, error, 0
        self.gate: asyncio.Event | None = None

    async def fetch(self) -> Any:
        self.asked += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return self.cards


def cards(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": i, "root": r, "parent": None} for i, r in pairs]}


class TestPlacement:
    async def test_configured_architecture_wins_and_is_never_looked_up(self) -> None:
        upstream = Upstream(cards(("v", "openai/whisper-small")))
        placement = Placement(config_with("v", {"architecture": VOXTRAL}), upstream.fetch)
        rules = await placement.rules("v")
        assert (rules.architecture, rules.placed_by) == (VOXTRAL, "config")
        assert upstream.asked == 0

    async def test_unknown_configured_architecture_warns_and_gets_global(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, "gateway.models"):
            placement = Placement(config_with("m", {"architecture": "NoSuchModel"}))
        assert "NoSuchModel" in caplog.text and 'models."m"' in caplog.text
        assert not (await placement.rules("m")).placed

    async def test_upstream_root_directory_and_name(self, tmp_path: Path) -> None:
        (tmp_path / "config.json").write_text(json.dumps({"architectures": [AF3]}))
        upstream = Upstream(cards(("dir", str(tmp_path)), ("hub", "mistralai/Voxtral-Mini-3B")))
        placement = Placement(Config(), upstream.fetch)
        by_dir, by_root = await placement.rules("dir"), await placement.rules("hub")
        assert (by_dir.architecture, by_dir.placed_by) == (AF3, f"model directory {tmp_path}")
        assert by_root.architecture == VOXTRAL
        assert by_root.placed_by == "upstream root mistralai/Voxtral-Mini-3B"
        by_name = await placement.rules("Qwen/Qwen2-Audio-7B-Instruct")
        assert by_name.placed_by == "served name"
        assert upstream.asked == 1  # asked at most every few seconds
        assert set(placement.known()) == {"dir", "hub", "Qwen/Qwen2-Audio-7B-Instruct"}

    async def test_read_model_dirs_off_reads_no_directory(self, tmp_path: Path) -> None:
        (tmp_path / "config.json").write_text(json.dumps({"architectures": [AF3]}))
        upstream = Upstream(cards(("dir", str(tmp_path))))
        config = validate_config({"placement": {"read_model_dirs": False}})
        assert not (await Placement(config, upstream.fetch).rules("dir")).placed

    async def test_ask_upstream_off_asks_nothing(self) -> None:
        upstream = Upstream(cards(("v", "mistralai/Voxtral-Mini-3B")))
        config = validate_config({"placement": {"ask_upstream": False}})
        assert not (await Placement(config, upstream.fetch).rules("v")).placed
        assert upstream.asked == 0

    async def test_a_failing_upstream_never_fails_a_request(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        upstream = Upstream(error=ConnectionRefusedError("down"))
        placement = Placement(Config(), upstream.fetch)
        with caplog.at_level(logging.DEBUG, "gateway.models"):
            rules = await placement.rules("mine")
        assert not rules.placed and "GET /v1/models failed" in caplog.text
        assert "'mine': not placed" in caplog.text

    async def test_a_slow_lookup_is_not_waited_for_past_the_bound(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr("gateway.models.placement.PLACE_WAIT_SECONDS", 0.05)
        upstream = Upstream(cards(("v", "mistralai/Voxtral-Mini-3B")))
        upstream.gate = asyncio.Event()
        placement = Placement(Config(), upstream.fetch)
        assert not (await placement.rules("v")).placed  # the global settings meanwhile
        upstream.gate.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if "v" in placement.known():
                break
        assert (await placement.rules("v")).architecture == VOXTRAL
        assert upstream.asked == 1

    async def test_an_unplaced_name_is_looked_for_again_after_retry_seconds(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        now = [1000.0]
        monkeypatch.setattr("gateway.models.placement.time.monotonic", lambda: now[0])
        upstream = Upstream(cards())
        placement = Placement(validate_config({"placement": {"retry_seconds": 60}}), upstream.fetch)
        assert not (await placement.rules("late")).placed
        upstream.cards = cards(("late", "nvidia/audio-flamingo-3-hf"))
        now[0] += 30
        assert not (await placement.rules("late")).placed  # kept
        now[0] += 31
        assert (await placement.rules("late")).architecture == AF3
        assert upstream.asked == 2

    async def test_a_model_that_is_not_a_string_gets_the_global_settings(self) -> None:
        assert not (await Placement(Config()).rules(None)).placed


class TestModelForms:
    """The form a model's clips are loaded in (normalize.form.TargetForm.for_model)."""

    @given(
        enabled=st.booleans(),
        channels=st.integers(0, 8),
        rate=st.integers(8_000, 192_000),
        stereo=st.booleans(),
        fmt=st.sampled_from(["PCM_16", "FLOAT"]),
    )
    def test_rate_and_channels(
        self, enabled: bool, channels: int, rate: int, stereo: bool, fmt: str
    ) -> None:
        normalize = validate_config(
            {"normalize": {"enabled": enabled, "channels": channels, "sample_format": fmt}}
        ).normalize
        form = TargetForm.for_model(normalize, rate, stereo)
        if not enabled and stereo:
            assert form is None  # as stored, as without profiles
            return
        assert form is not None and form.subtype == fmt
        assert form.channels == (channels if stereo else 1)
        assert form.sample_rate == (rate if enabled else 0)  # off: the clip's own rate
        assert form.any_container == (not enabled)

    @pytest.mark.parametrize(
        ("channels", "rate", "subtype", "in_mono_form"),
        [(1, 16_000, "PCM_16", True), (1, 44_100, "FLOAT", True), (2, 16_000, "PCM_16", False)],
    )
    def test_mono_only_takes_any_mono_header(
        self, tmp_path: Path, channels: int, rate: int, subtype: str, in_mono_form: bool
    ) -> None:
        for container in ("WAV", "FLAC") if subtype == "PCM_16" else ("WAV",):
            path = tmp_path / f"clip.{container.lower()}"
            soundfile.write(
                path, np.zeros((800, channels)), rate, subtype=subtype, format=container
            )
            mono_only = TargetForm(0, 1, "PCM_16", any_container=True)
            assert in_form(path.read_bytes()[:65536], mono_only) == in_mono_form


async def test_health_lists_every_placed_name_and_the_latest_unplaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("gateway.models.placement.SHOWN_UNPLACED", 2)
    placement = Placement(config_with("v", {"architecture": VOXTRAL}))
    names = ["Qwen/Qwen2-Audio-7B-Instruct", "one", "two", "three"]
    for name in names:
        await placement.rules(name)
    assert set(placement.known()) == {"v", "Qwen/Qwen2-Audio-7B-Instruct", "two", "three"}
