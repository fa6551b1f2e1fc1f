"""The bridge's request mapping by example: tools, tool calls and their outputs, reasoning
replay, refusals, instructions, images, reasoning effort, logprobs, verbosity; and the 400s for
what it does not translate, named by their place."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.bridge import UNSUPPORTED, responses_to_chat
from gateway.errors import InvalidRequest
from tests import bridge_corpus as corpus

ASK = {"role": "user", "content": "Weather?"}
WEATHER_CHAT = {
    "type": "function",
    "function": {k: v for k, v in corpus.WEATHER.items() if k != "type"},
}
CALL_CHAT = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
CALL_2_CHAT = {
    "id": "call_2",
    "type": "function",
    "function": {"name": "get_time", "arguments": "{}"},
}


def chat(**body: Any) -> dict[str, Any]:
    return responses_to_chat({"model": "m", **body}).chat


def messages(*items: Any, **body: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = chat(input=list(items), **body)["messages"]
    return found


def refused(body: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as raised:
        responses_to_chat({"model": "m", **body})
    return raised.value


# --- tools ---------------------------------------------------------------------------------------


def test_function_tools_keep_name_description_parameters_and_strict() -> None:
    sent = chat(input="x", tools=[corpus.WEATHER, corpus.CLOCK])
    clock = {"name": "get_time", "parameters": corpus.CLOCK["parameters"]}  # strict null: absent
    assert sent["tools"] == [WEATHER_CHAT, {"type": "function", "function": clock}]
    assert "tool_choice" not in sent and "parallel_tool_calls" not in sent


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (
            {"type": "function", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
    ],
)
def test_tool_choice(choice: Any, sent: Any) -> None:
    body = chat(input="x", tools=[corpus.WEATHER], tool_choice=choice, parallel_tool_calls=False)
    assert (body["tool_choice"], body["parallel_tool_calls"]) == (sent, False)


@pytest.mark.parametrize("choice", ["auto", "none", None])
def test_without_tools_the_harmless_settings_are_not_sent(choice: Any) -> None:
    body = chat(input="x", tools=[], tool_choice=choice, parallel_tool_calls=True)
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(body)


def test_a_choice_that_needs_tools_without_tools_is_refused() -> None:
    error = refused({"input": "x", "tool_choice": "required"})
    assert error.param == "tool_choice"


@pytest.mark.parametrize(
    ("tools", "choice", "param"),
    [
        ([{"type": "file_search", "vector_store_ids": []}], None, "tools[0].type"),
        ([{"type": "mcp", "server_label": "s"}], None, "tools[0].type"),
        ([{"type": "computer_use_preview"}], None, "tools[0].type"),
        ([{"type": "custom", "name": "c"}], None, "tools[0].type"),
        ([{**corpus.CLOCK, "defer_loading": True}], None, "tools[0].defer_loading"),
        (
            [corpus.CLOCK],
            {"type": "allowed_tools", "mode": "auto", "tools": []},
            "tool_choice.type",
        ),
        ([corpus.CLOCK], {"type": "web_search_preview"}, "tool_choice.type"),
        ([corpus.CLOCK], {"type": "function", "name": "get_time", "x": 1}, "tool_choice.x"),
    ],
)
def test_what_chat_cannot_run_is_refused_by_name(tools: Any, choice: Any, param: str) -> None:
    error = refused({"input": "x", "tools": tools, "tool_choice": choice})
    assert (error.code, error.param) == (UNSUPPORTED, param)
    assert "does not translate" in error.message and "cannot honour" not in error.message


def test_defer_loading_false_is_accepted() -> None:
    assert chat(input="x", tools=[{**corpus.CLOCK, "defer_loading": False}])["tools"]


# --- calls and outputs ---------------------------------------------------------------------------


def test_a_call_and_its_output() -> None:
    assert messages(ASK, corpus.CALL, corpus.OUTPUT) == [
        ASK,
        {"role": "assistant", "content": None, "tool_calls": [CALL_CHAT]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
    ]


def test_consecutive_calls_and_text_make_one_assistant_message() -> None:
    text = corpus.assistant_output("Checking.")
    found = messages(ASK, text, corpus.CALL, corpus.CALL_2, corpus.OUTPUT, corpus.OUTPUT_2)
    assert found[1] == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [CALL_CHAT, CALL_2_CHAT],
    }
    assert [m["tool_call_id"] for m in found[2:]] == ["call_1", "call_2"]


def test_replay_only_fields_are_accepted_and_not_sent() -> None:
    call = {**corpus.CALL, "id": "fc_1", "status": "completed"}
    output = {**corpus.OUTPUT, "id": "fco_1", "status": "completed"}
    assert messages(ASK, call, output) == messages(ASK, corpus.CALL, corpus.OUTPUT)


def test_an_output_as_text_parts() -> None:
    output = {**corpus.OUTPUT, "output": [{"type": "input_text", "text": "21 C"}]}
    assert messages(ASK, corpus.CALL, output)[-1]["content"] == [{"type": "text", "text": "21 C"}]


def test_chat_shaped_tool_history() -> None:
    assistant = {"role": "assistant", "content": "", "tool_calls": [CALL_CHAT]}
    tool = {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}
    assert messages(ASK, assistant, tool) == [
        ASK,
        {"role": "assistant", "content": None, "tool_calls": [CALL_CHAT]},
        tool,
    ]


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({**corpus.CALL, "namespace": "ns"}, "input[1].namespace"),
        ({**corpus.CALL, "caller": {"type": "program"}}, "input[1].caller"),
        ({**corpus.OUTPUT, "name": "get_weather"}, "input[1].name"),
        (
            {**corpus.OUTPUT, "output": [{"type": "input_file", "file_id": "f"}]},
            "input[1].output[0].type",
        ),
        (
            {"role": "assistant", "content": "", "tool_calls": [{**CALL_CHAT, "type": "custom"}]},
            "input[1].tool_calls[0].type",
        ),
        (
            {"role": "assistant", "content": "", "tool_calls": [{**CALL_CHAT, "index": 0}]},
            "input[1].tool_calls[0].index",
        ),
        ({"role": "tool", "tool_call_id": "c", "content": "x", "name": "f"}, "input[1].name"),
        ({"type": "custom_tool_call", "call_id": "c", "name": "f", "input": "x"}, "input[1].type"),
        ({"type": "mcp_call", "id": "m"}, "input[1].type"),
        ({"type": "compaction", "encrypted_content": "x"}, "input[1].type"),
    ],
)
def test_what_a_call_item_cannot_carry_is_refused_by_name(item: dict[str, Any], param: str) -> None:
    error = refused({"input": [ASK, item]})
    assert (error.code, error.param) == (UNSUPPORTED, param)


# --- reasoning and refusals ----------------------------------------------------------------------


def test_reasoning_replays_onto_its_assistant_message() -> None:
    found = messages(
        ASK, corpus.reasoning_summary("It says Paris."), corpus.assistant_output("Paris.")
    )
    assert found[1] == {"role": "assistant", "content": "Paris.", "reasoning": "It says Paris."}


def test_the_bridges_own_reasoning_shape_replays() -> None:
    found = messages(ASK, corpus.reasoning_bridge("a tone"), corpus.assistant_output("A tone."))
    assert found[1] == {"role": "assistant", "content": "A tone.", "reasoning": "a tone"}


def test_reasoning_content_is_preferred_over_its_summary() -> None:
    both = {
        **corpus.reasoning_bridge("full"),
        "summary": [{"type": "summary_text", "text": "short"}],
    }
    assert messages(ASK, both)[1]["reasoning"] == "full"


def test_reasoning_before_a_call_and_reasoning_alone() -> None:
    found = messages(ASK, corpus.reasoning_summary("Need it."), corpus.CALL, corpus.OUTPUT)
    assert found[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [CALL_CHAT],
        "reasoning": "Need it.",
    }
    alone = messages(
        ASK, corpus.reasoning_summary("Hm.", "Yes."), {"role": "user", "content": "Go."}
    )
    assert alone[1] == {"role": "assistant", "content": None, "reasoning": "Hm.\nYes."}


def test_encrypted_reasoning_is_refused() -> None:
    item = {**corpus.reasoning_summary("x"), "encrypted_content": "gAAAA"}
    assert refused({"input": [ASK, item]}).param == "input[1].encrypted_content"


def test_a_refusal_part_becomes_chats_refusal() -> None:
    item = {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}
    assert messages(ASK, item)[1] == {"role": "assistant", "content": None, "refusal": "No."}


def test_assistant_audio_is_refused() -> None:
    item = {"role": "assistant", "content": [corpus.audio_part()]}
    assert refused({"input": [ASK, item]}).param == "input[1].content[0].type"


@pytest.mark.parametrize(
    ("reasoning", "param"),
    [
        ({"effort": "low", "summary": "auto"}, "reasoning.summary"),
        ({"mode": "x"}, "reasoning.mode"),
    ],
)
def test_reasoning_effort_and_what_else_is_refused(reasoning: Any, param: str) -> None:
    assert (
        chat(input="x", reasoning={"effort": "high", "summary": None})["reasoning_effort"] == "high"
    )
    assert refused({"input": "x", "reasoning": reasoning}).param == param


# --- instructions --------------------------------------------------------------------------------


def test_instructions_fold_the_leading_system_and_developer_messages() -> None:
    system = {"role": "system", "content": "Be brief."}
    developer = {"role": "developer", "content": [{"type": "input_text", "text": "Plain."}]}
    late = {"role": "system", "content": "Late."}
    found = messages(system, developer, ASK, late, instructions="Transcribe.")
    assert found == [{"role": "system", "content": "Transcribe.\n\nBe brief.\n\nPlain."}, ASK, late]
    assert messages(system, ASK) == [system, ASK]  # without instructions, nothing is folded


def test_a_leading_message_that_is_not_only_text_is_not_folded() -> None:
    image = {"type": "input_image", "image_url": corpus.IMAGE_URI}
    system = {"role": "system", "content": [image]}
    found = messages(system, ASK, instructions="I.")
    assert found[0] == {"role": "system", "content": "I."}
    assert found[1]["content"][0]["type"] == "image_url"


# --- parts ---------------------------------------------------------------------------------------


def test_images_with_their_detail() -> None:
    parts = [
        {"type": "input_image", "image_url": corpus.IMAGE_URI},
        {"type": "input_image", "image_url": "https://x/y.png", "detail": "high"},
    ]
    assert messages({"role": "user", "content": parts})[0]["content"] == [
        {"type": "image_url", "image_url": {"url": corpus.IMAGE_URI, "detail": "auto"}},
        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "high"}},
    ]


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"type": "input_image", "file_id": "file_1"}, "input[0].content[0].file_id"),
        (
            {"type": "input_image", "image_url": "u", "detail": "original"},
            "input[0].content[0].detail",
        ),
        (
            {"type": "input_text", "text": "t", "prompt_cache_breakpoint": {}},
            "input[0].content[0].prompt_cache_breakpoint",
        ),
        (
            {"type": "input_file", "file_url": "a.wav", "file_id": "f"},
            "input[0].content[0].file_id",
        ),
        (
            {"type": "input_audio", "input_audio": {"data": "x", "format": "wav", "rate": 1}},
            "input[0].content[0].input_audio.rate",
        ),
        ({"type": "input_video", "video_url": "v"}, "input[0].content[0].type"),
    ],
)
def test_a_part_field_the_bridge_does_not_translate_is_refused(
    part: dict[str, Any], param: str
) -> None:
    error = refused({"input": [{"role": "user", "content": [part]}]})
    assert (error.code, error.param) == (UNSUPPORTED, param)


def test_replayed_output_text_fields_are_accepted_and_not_sent() -> None:
    found = messages(ASK, corpus.assistant_output("Hi."))
    assert found[1] == {"role": "assistant", "content": "Hi."}


def test_a_file_path_part_is_named_by_its_place_after_an_assistant_turn() -> None:
    file_part = {"type": "input_file", "file_url": "a.wav", "filename": "a.wav"}
    items = [ASK, corpus.CALL, corpus.OUTPUT, {"role": "user", "content": [file_part]}]
    bridged = responses_to_chat({"model": "m", "input": items})
    assert bridged.chat["messages"][3]["content"] == [
        {"type": "audio_url", "audio_url": {"url": "a.wav"}}
    ]
    assert bridged.part_params == {(3, 0): "input[3].content[0].file_url"}


# --- generation settings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "sent"),
    [
        ({"top_logprobs": 3}, {"logprobs": True, "top_logprobs": 3}),
        ({"include": ["message.output_text.logprobs"]}, {"logprobs": True}),
        (
            {"include": ["message.output_text.logprobs"], "top_logprobs": 0},
            {"logprobs": True, "top_logprobs": 0},
        ),
        ({"include": []}, {}),
    ],
)
def test_logprobs(fields: dict[str, Any], sent: dict[str, Any]) -> None:
    body = chat(input="x", **fields)
    assert {k: body[k] for k in ("logprobs", "top_logprobs") if k in body} == sent


def test_other_includes_are_refused_by_place() -> None:
    error = refused(
        {"input": "x", "include": ["message.output_text.logprobs", "reasoning.encrypted_content"]}
    )
    assert error.param == "include[1]"


def test_verbosity_medium_is_accepted_and_the_others_refused() -> None:
    assert "verbosity" not in chat(input="x", text={"verbosity": "medium"})
    assert refused({"input": "x", "text": {"verbosity": "high"}}).param == "text.verbosity"
