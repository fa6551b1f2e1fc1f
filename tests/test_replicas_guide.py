"""The "Many replicas" guide's configs, which the two-replica engine suite reads and runs: the
gateway's is a valid config whose upstream is the router, with the key in `X-Session-ID`;
vllm-router's command has the policy and the recovery flags the bench and the suite start it with,
SMG's the policy and flags engine/smg.py recommends and a routing-key header that is the
gateway's."""

from __future__ import annotations

from pathlib import Path

from engine.router import RECOVERY_FLAGS
from engine.smg import RECOMMENDED_FLAGS, RECOMMENDED_POLICY
from gateway.config import load_config
from tests.engine.replicas_recipe import (
    GATEWAY_TITLE,
    GUIDE,
    SMG_TITLE,
    gateway_sections,
    router_command,
)
from tests.litellm.recipe import blocks


def test_the_gateway_config_is_valid_and_keys_x_session_id(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(blocks(GUIDE.read_text())[GATEWAY_TITLE])
    config = load_config(path)
    assert config.splice.repeats == "reference"
    assert config.routing.affinity_headers == ["X-Session-ID"]
    assert config.upstream.url == "http://127.0.0.1:8001"  # the router's --port below


def test_the_suite_runs_the_page_less_its_own_choices() -> None:
    assert gateway_sections() == {
        "splice": {"repeats": "reference"},
        "routing": {"affinity_headers": ["X-Session-ID"]},
    }
    assert "routing" not in gateway_sections(key=False)


def test_the_router_command_is_consistent_hash_with_the_recovery_flags() -> None:
    command = router_command()
    assert command.policy == "consistent_hash"
    assert command.flags == list(RECOVERY_FLAGS)
    text = blocks(GUIDE.read_text())["start vllm-router"]
    assert "--port 8001" in text and "--prometheus-port" in text


def test_smgs_command_is_the_recommended_one_keyed_on_the_gateways_header() -> None:
    command = router_command(SMG_TITLE)
    assert command.policy == RECOMMENDED_POLICY
    assert command.flags == ["--routing-key-headers", "x-session-id", *RECOMMENDED_FLAGS]
    [header] = gateway_sections()["routing"]["affinity_headers"]
    assert header.lower() == "x-session-id"
    text = blocks(GUIDE.read_text())[SMG_TITLE]
    assert "--port 8001" in text and "--prometheus-port" in text
