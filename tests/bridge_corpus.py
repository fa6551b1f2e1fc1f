"""Responses request bodies with audio, for differential tests of the Responses bridge. Stdlib only.

`CASES` maps a name to a `/v1/responses` body the bridge answers (200): function tools and every
`tool_choice` form, `function_call` / `function_call_output` turns, chat-shaped tool history,
reasoning replay (summary and the bridge's own `reasoning_text` shape), `instructions` folded
with system and developer messages, `reasoning.effort`, images, logprobs, multi-turn. Every
body carries audio: the sidechannel `metadata.audio_data` (a data URI the gateway splices into
the last user message, as NeMo Gym does) or, where noted, an `input_audio` part in place.

`GYM_REFUSES` names the cases NeMo Gym 0.7.0's converter cannot take (and why); the others
must convert to the same chat body as the bridge's, modulo the differences documented in
docs/reference/responses-bridge.md. The bodies are built fresh on each call of `cases()`, so
tests may modify them.
"""

from __future__ import annotations

import base64
import io
import math
import struct
import wave
from typing import Any

MODEL = "stub-audio-model"


def wav_bytes(seconds: float = 0.25, rate: int = 16000, hertz: float = 440.0) -> bytes:
    """A mono 16-bit PCM WAV tone."""
    frames = int(seconds * rate)
    samples = (int(8000 * math.sin(2 * math.pi * hertz * n / rate)) for n in range(frames))
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(b"".join(struct.pack("<h", s) for s in samples))
    return out.getvalue()


WAV_BASE64 = base64.b64encode(wav_bytes()).decode("ascii")
AUDIO_DATA_URI = "data:audio/wav;base64," + WAV_BASE64
IMAGE_URI = (  # a 1x1 PNG
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9"
    "awAAAABJRU5ErkJggg=="
)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
CLOCK = {
    "type": "function",
    "name": "get_time",
    "parameters": {"type": "object", "properties": {"utc": {"type": "boolean"}}},
    "strict": None,  # required by the spec, null allowed
}
CALL = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
}
CALL_2 = {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": '{"temp_c": 21}'}
OUTPUT_2 = {"type": "function_call_output", "call_id": "call_2", "output": "12:00"}
ASK = {"role": "user", "content": "Which city is named in the clip? Get its weather."}


def audio_meta(**extra: str) -> dict[str, str]:
    return {"audio_data": AUDIO_DATA_URI, **extra}


def body(input_: Any, **fields: Any) -> dict[str, Any]:
    """A body with the sidechannel clip (unless `metadata` is given) and the stub's model."""
    return {"model": MODEL, "input": input_, "metadata": audio_meta(), **fields}


def reasoning_summary(*texts: str) -> dict[str, Any]:
    """A reasoning item as OpenAI (and NeMo Gym) return it: text in `summary`."""
    summary = [{"type": "summary_text", "text": text} for text in texts]
    return {"type": "reasoning", "id": "rs_1", "summary": summary, "status": "completed"}


def reasoning_bridge(text: str) -> dict[str, Any]:
    """A reasoning item as the bridge (and vLLM's own Responses route) returns it."""
    return {
        "id": "rs_2",
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": "completed",
    }


def assistant_output(text: str) -> dict[str, Any]:
    """An assistant message as a Responses answer returns it (replay-only fields included)."""
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def audio_part() -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": WAV_BASE64, "format": "wav"}}


def _cases() -> dict[str, dict[str, Any]]:
    tools = [WEATHER, CLOCK]
    return {
        "string_input": body("Transcribe the clip."),
        "user_parts": body([{"role": "user", "content": [{"type": "input_text", "text": "Hi."}]}]),
        "tools_auto": body([ASK], tools=tools, tool_choice="auto"),
        "tools_default_choice": body([ASK], tools=[WEATHER]),
        "tools_required": body([ASK], tools=tools, tool_choice="required"),
        "tools_none": body([ASK], tools=tools, tool_choice="none"),
        "tool_named": body(
            [ASK], tools=tools, tool_choice={"type": "function", "name": "get_weather"}
        ),
        "tools_serial": body([ASK], tools=tools, parallel_tool_calls=False),
        "tools_parallel": body([ASK], tools=tools, parallel_tool_calls=True, tool_choice="auto"),
        "no_tools_parallel_flag": body([ASK], tools=[], parallel_tool_calls=False),
        "call_and_output": body([ASK, CALL, OUTPUT], tools=[WEATHER]),
        "call_output_no_tools": body([ASK, CALL, OUTPUT]),
        "two_calls_one_turn": body([ASK, CALL, CALL_2, OUTPUT, OUTPUT_2], tools=tools),
        "text_then_call": body([ASK, assistant_output("Let me check."), CALL, OUTPUT], tools=tools),
        "call_replayed_with_ids": body(
            [ASK, {**CALL, "id": "fc_1", "status": "completed"}, OUTPUT], tools=[WEATHER]
        ),
        "output_as_parts": body(
            [ASK, CALL, {**OUTPUT, "output": [{"type": "input_text", "text": "21 C"}]}],
            tools=[WEATHER],
        ),
        "chat_shaped_history": body(
            [
                ASK,
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"},
                {"role": "user", "content": "Thanks. Warm enough?"},
            ],
            tools=[WEATHER],
        ),
        "reasoning_summary_replay": body(
            [
                ASK,
                reasoning_summary("The clip says Paris."),
                assistant_output("Paris."),
                {"role": "user", "content": "And the weather?"},
            ]
        ),
        "reasoning_bridge_replay": body(
            [
                ASK,
                reasoning_bridge("the clip is a tone"),
                assistant_output("A tone."),
                {"role": "user", "content": "How long is it?"},
            ]
        ),
        "reasoning_then_call": body(
            [ASK, reasoning_summary("I need the weather."), CALL, OUTPUT], tools=[WEATHER]
        ),
        "reasoning_alone": body(
            [ASK, reasoning_summary("Thinking."), {"role": "user", "content": "Go on."}]
        ),
        "reasoning_two_parts": body(
            [
                ASK,
                reasoning_summary("First.", "Second."),
                assistant_output("Done."),
                {"role": "user", "content": "Again."},
            ]
        ),
        "instructions": body("What is said?", instructions="Answer in one word."),
        "instructions_fold": body(
            [
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "input_text", "text": "No lists."}]},
                {"role": "user", "content": "Transcribe."},
            ],
            instructions="You transcribe audio.",
        ),
        "system_developer_no_instructions": body(
            [
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": "Plain."},
                {"role": "user", "content": "Transcribe."},
            ]
        ),
        "instructions_with_late_system": body(
            [
                {"role": "user", "content": "Hi."},
                {"role": "system", "content": "Switch to French."},
                {"role": "user", "content": "Transcribe."},
            ],
            instructions="You transcribe audio.",
        ),
        "reasoning_effort": body("Think, then transcribe.", reasoning={"effort": "low"}),
        "reasoning_effort_high_tools": body([ASK], reasoning={"effort": "high"}, tools=[WEATHER]),
        "image": body(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_image", "image_url": IMAGE_URI, "detail": "auto"},
                        {"type": "input_text", "text": "Describe both."},
                    ],
                }
            ]
        ),
        "image_detail": body(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_image", "image_url": IMAGE_URI, "detail": "low"},
                        {"type": "input_text", "text": "What is shown?"},
                    ],
                }
            ]
        ),
        "top_logprobs": body("Transcribe.", top_logprobs=3),
        "sampling": body(
            "Transcribe.", temperature=0.2, top_p=0.9, max_output_tokens=64, user="u-1"
        ),
        "structured_output": body(
            "Give the city.",
            text={
                "format": {
                    "type": "json_schema",
                    "name": "city",
                    "strict": True,
                    "schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                }
            },
        ),
        "json_object_medium_verbosity": body(
            "Give JSON.", text={"format": {"type": "json_object"}, "verbosity": "medium"}
        ),
        "metadata_kept": {"model": MODEL, "input": "Transcribe.", "metadata": audio_meta(run="r1")},
        "refusal_replay": body(
            [
                ASK,
                {
                    "id": "msg_2",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "refusal", "refusal": "I cannot."}],
                },
                {"role": "user", "content": "Please try."},
            ]
        ),
        "assistant_null_content_call": body(
            [ASK, {"type": "message", "role": "assistant", "content": None}, CALL, OUTPUT],
            tools=[WEATHER],
        ),
        "multi_turn": body(
            [
                ASK,
                assistant_output("Paris."),
                {"role": "user", "content": "Weather there?"},
                CALL,
                OUTPUT,
                assistant_output("21 C."),
                {"role": "user", "content": "Thanks."},
            ],
            tools=tools,
            tool_choice="auto",
            reasoning={"effort": "medium"},
            instructions="Be kind.",
        ),
        # Audio in place (an input_audio part): NeMo Gym's request model has no audio part.
        "input_audio_part": {
            "model": MODEL,
            "input": [
                {"role": "user", "content": [audio_part(), {"type": "input_text", "text": "What?"}]}
            ],
        },
        "input_audio_tools_turn": {
            "model": MODEL,
            "input": [
                {
                    "role": "user",
                    "content": [audio_part(), {"type": "input_text", "text": "City?"}],
                },
                CALL,
                OUTPUT,
            ],
            "tools": [WEATHER],
            "tool_choice": "auto",
        },
        "include_logprobs": body("Transcribe.", include=["message.output_text.logprobs"]),
        "truncation_auto": body("Transcribe.", truncation="auto"),
    }


GYM_REFUSES: dict[str, str] = {
    "input_audio_part": "NeMo Gym's request model has no input_audio part (422)",
    "input_audio_tools_turn": "NeMo Gym's request model has no input_audio part (422)",
    "include_logprobs": "NeMo Gym's converter refuses any `include`",
    "truncation_auto": "NeMo Gym's converter refuses `truncation`",
    "assistant_null_content_call": "NeMo Gym's request model wants a message's content (422)",
}


def cases() -> dict[str, dict[str, Any]]:
    """Fresh copies of the corpus: name -> Responses body."""
    return _cases()
