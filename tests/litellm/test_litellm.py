"""A real LiteLLM proxy (1.108.7, `hosted_vllm/...`) in front of the gateway, driven with the
openai SDK as LiteLLM's client. What reached the gateway is read from its /gateway/metrics and
what reached the upstream from the stub's body log (tests/litellm/conftest.py draws the chain).

- Chat `metadata.audio_path` does not reach the gateway: LiteLLM drops chat metadata (the same
  body sent straight to the gateway is spliced, so the assertion can fail).
- A path in a chat content part (`file://` URL or relative) reaches it and is spliced: the stub
  decoded the clip, streamed or not; Responses `metadata` and `input_file` parts pass too.
- Errors come back to LiteLLM's client with their status and error type; LiteLLM rewrites file
  URLs in relayed messages as `file://REDACTED`.
- With `router_settings.disable_cooldowns`, a 5xx does not cool the only deployment down: the
  next request is tried again (not LiteLLM's 429).
- LiteLLM lists the gateway's models at start and sends its api_key as the gateway's key."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import parse_metrics
from tests.litellm.conftest import Deployment
from tests.litellm.processes import LITELLM_READY_SECONDS
from tests.litellm.venv import require_litellm

require_litellm()  # a one-line skip without LiteLLM's venv (a failure under CI=true)

# The first test also waits for the session's chain to start (LiteLLM's start-up dominates).
pytestmark = pytest.mark.timeout(LITELLM_READY_SECONDS + 120)

PROMPT = {"type": "text", "text": "Transcribe the audio."}
HTTP_SECONDS = 60.0
ATTEMPTS = 3  # LiteLLM's router tries a request num_retries + 1 times (its default: 2 + 1)


def client_of(deployment: Deployment) -> openai.OpenAI:
    """LiteLLM's client: the openai SDK with LiteLLM's master key, no retries of its own."""
    return openai.OpenAI(
        base_url=f"{deployment.litellm_url}/v1",
        api_key=deployment.master_key,
        max_retries=0,
        timeout=HTTP_SECONDS,
    )


def chat(
    deployment: Deployment, content: Any, *, stream: bool = False, model: str | None = None,
    **extra: Any,
) -> str:  # fmt: skip
    """One user message through LiteLLM; the answer's text (a stream's deltas joined)."""
    messages = [{"role": "user", "content": content}]
    name = model or deployment.model
    with client_of(deployment) as client:
        if not stream:
            completion = client.chat.completions.create(model=name, messages=messages, **extra)
            return completion.choices[0].message.content or ""
        chunks = client.chat.completions.create(model=name, messages=messages, stream=True, **extra)
        with chunks:
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def respond(deployment: Deployment, input: Any, **extra: Any) -> str:
    """One Responses request through LiteLLM; the answer's output text."""
    with client_of(deployment) as client:
        response = client.responses.create(model=deployment.model, input=input, **extra)
        return response.output_text


def audio_url(url: str) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": {"url": url}}


def data_uri(path: Path) -> str:
    return "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode()


def heard(path: Path) -> str:
    """How the stub's answer names a clip it decoded: by its sha256's first 12 digits."""
    return "sha256=" + hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def upstream_bodies(deployment: Deployment) -> list[dict[str, Any]]:
    """Every chat body the stub received so far, in order."""
    lines = deployment.body_log.read_text().splitlines()
    return [json.loads(line) for line in lines]


def metrics_of(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/gateway/metrics", timeout=HTTP_SECONDS) as response:
        return parse_metrics(response.read().decode())


def requests_seen(url: str, route: str, status: int) -> float:
    name = f'audio_gateway_requests_total{{route="{route}",status="{status}"}}'
    return metrics_of(url).get(name, 0.0)


def clips_seen(deployment: Deployment, carrier: str) -> float:
    """The gateway's clips resolved so far, by carrier (sidechannel, content_part)."""
    name = f'audio_gateway_clips_total{{carrier="{carrier}"}}'
    return metrics_of(deployment.gateway_url).get(name, 0.0)


def post_to_gateway(deployment: Deployment, body: dict[str, Any]) -> dict[str, Any]:
    """A chat request straight to the gateway (with its key), not through LiteLLM."""
    request = urllib.request.Request(
        f"{deployment.gateway_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {deployment.gateway_key}",
        },
    )
    with urllib.request.urlopen(request, timeout=HTTP_SECONDS) as response:
        answer: dict[str, Any] = json.load(response)
        return answer


def gateway_error_through_litellm(
    exc: openai.APIStatusError, status: int, litellm_type: str
) -> dict[str, Any]:
    """What LiteLLM's client gets for a gateway error: the gateway's status, LiteLLM's own
    `type` for it, `code` the status as a string, `param` null, and the gateway's whole error
    object quoted in `message` (returned, parsed)."""
    assert exc.status_code == status, exc.body
    body = exc.body
    assert isinstance(body, dict), body
    assert (body["type"], body["code"], body["param"]) == (litellm_type, str(status), None), body
    quoted = re.search(r'(\{"error": ?\{.*\}\})', body["message"])
    assert quoted, body
    error: dict[str, Any] = json.loads(quoted[1])["error"]
    return error


# --- what reaches the gateway --------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_chat_metadata_audio_path_does_not_reach_the_gateway(
    deployment: Deployment, stream: bool
) -> None:
    metadata = {"audio_path": "a.wav", "note": "any other key the gateway would forward"}
    sent = len(upstream_bodies(deployment))
    chats = requests_seen(deployment.gateway_url, "chat_completions", 200)
    clips = clips_seen(deployment, "sidechannel")
    assert chat(deployment, "Transcribe the audio.", stream=stream, metadata=metadata) == "no audio"
    [body] = upstream_bodies(deployment)[sent:]
    assert "metadata" not in body, body
    assert body["messages"] == [{"role": "user", "content": "Transcribe the audio."}]
    assert requests_seen(deployment.gateway_url, "chat_completions", 200) == chats + 1
    assert clips_seen(deployment, "sidechannel") == clips
    # The same request straight to the gateway: the clip is spliced and the other key forwarded.
    direct = {"model": deployment.model, "messages": body["messages"], "metadata": metadata}
    answer = post_to_gateway(deployment, direct)
    assert heard(deployment.audio_root / "a.wav") in answer["choices"][0]["message"]["content"]
    assert upstream_bodies(deployment)[-1]["metadata"] == {"note": metadata["note"]}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("spelling", ["file_url", "relative"])
def test_a_path_in_a_content_part_reaches_the_gateway_and_is_spliced(
    deployment: Deployment, spelling: str, stream: bool
) -> None:
    clip = deployment.audio_root / "b.wav"
    url = clip.as_uri() if spelling == "file_url" else clip.name
    sent = len(upstream_bodies(deployment))
    clips = clips_seen(deployment, "content_part")
    answer = chat(deployment, [audio_url(url), PROMPT], stream=stream)
    assert heard(clip) in answer, answer
    assert clips_seen(deployment, "content_part") == clips + 1
    [body] = upstream_bodies(deployment)[sent:]
    assert body["messages"][0]["content"] == [audio_url(data_uri(clip)), PROMPT]


def test_responses_metadata_passes_through_litellm(deployment: Deployment) -> None:
    clip = deployment.audio_root / "a.wav"
    answer = respond(deployment, "Transcribe the audio.", metadata={"audio_path": clip.name})
    assert heard(clip) in answer
    assert upstream_bodies(deployment)[-1]["messages"][0]["content"][0] == audio_url(data_uri(clip))


def test_responses_input_file_with_a_file_url_passes_through_litellm(
    deployment: Deployment,
) -> None:
    clip = deployment.audio_root / "b.wav"
    content = [
        {"type": "input_text", "text": "Transcribe the audio."},
        {"type": "input_file", "file_url": clip.as_uri()},
    ]
    assert heard(clip) in respond(deployment, [{"role": "user", "content": content}])


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_path_outside_the_roots_comes_back_as_403_with_its_url_redacted(
    deployment: Deployment, stream: bool
) -> None:
    outside = deployment.outside / "secret.wav"
    sent = len(upstream_bodies(deployment))
    refused = requests_seen(deployment.gateway_url, "chat_completions", 403)
    with pytest.raises(openai.PermissionDeniedError) as caught:
        chat(deployment, [audio_url(outside.as_uri()), PROMPT], stream=stream)
    error = gateway_error_through_litellm(caught.value, 403, "permission_error")
    assert error["param"] == "messages[0].content[0].audio_url.url", error
    assert error["code"] == "audio_path_forbidden", error
    assert error["message"].startswith("messages[0].content[0].audio_url.url: 'file://REDACTED'")
    assert str(outside) not in str(caught.value.body)
    # LiteLLM takes the 403 for a transient APIError and tries twice more (num_retries = 2):
    # the gateway refuses each attempt, and none reaches the upstream.
    assert requests_seen(deployment.gateway_url, "chat_completions", 403) == refused + ATTEMPTS
    assert len(upstream_bodies(deployment)) == sent


def test_an_upstream_400_comes_back_as_400(deployment: Deployment) -> None:
    not_audio = "data:audio/wav;base64," + base64.b64encode(b"not a wav file").decode()
    sent = len(upstream_bodies(deployment))
    with pytest.raises(openai.BadRequestError) as caught:
        chat(deployment, [audio_url(not_audio), PROMPT])
    error = gateway_error_through_litellm(caught.value, 400, "invalid_request_error")
    assert "failed to decode audio" in error["message"], error  # vLLM's, relayed by the gateway
    assert len(upstream_bodies(deployment)) == sent + 1  # a 400 is not retried


def test_a_responses_path_outside_the_roots_comes_back_as_403(deployment: Deployment) -> None:
    outside = deployment.outside / "secret.wav"
    sent = len(upstream_bodies(deployment))
    with pytest.raises(openai.PermissionDeniedError) as caught:
        respond(deployment, "Transcribe the audio.", metadata={"audio_path": str(outside)})
    error = gateway_error_through_litellm(caught.value, 403, "permission_error")
    assert (error["param"], error["code"]) == ("metadata.audio_path", "audio_path_forbidden")
    assert "'REDACTED'" in error["message"], error  # LiteLLM redacts absolute paths too
    assert len(upstream_bodies(deployment)) == sent  # nothing went upstream


def test_after_a_5xx_the_only_deployment_is_tried_again(deployment: Deployment) -> None:
    """The gateway's 502 (its upstream is down) reaches the client each time: with cooldowns
    disabled LiteLLM does not answer 429 for the deployment it just saw fail."""
    seen = requests_seen(deployment.down_gateway_url, "chat_completions", 502)
    for request in range(1, 3):
        with pytest.raises(openai.APIStatusError) as caught:
            chat(deployment, [PROMPT], model=deployment.down_model)
        error = gateway_error_through_litellm(caught.value, 502, "internal_server_error")
        assert error["code"] == "upstream_unreachable", (request, error)
        assert requests_seen(deployment.down_gateway_url, "chat_completions", 502) == (
            seen + request * ATTEMPTS
        )


# --- start-up and keys ----------------------------------------------------------------------------


def test_litellm_lists_the_models_at_start_with_the_gateways_key(deployment: Deployment) -> None:
    assert requests_seen(deployment.gateway_url, "passthrough", 200) >= 1
    assert requests_seen(deployment.down_gateway_url, "passthrough", 502) >= 1
    request = urllib.request.Request(f"{deployment.gateway_url}/v1/models")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=HTTP_SECONDS)
    caught.value.close()
    assert caught.value.code == 401  # the key LiteLLM sent is what let it in
