"""The Responses -> chat-completions bridge (`[responses] audio = "chat_bridge"`). Pure.

vLLM 0.33's Responses API refuses every audio part, so a `/v1/responses` row carrying the
audio sidechannel, or audio parts in its input, is sent to the upstream's
`/v1/chat/completions` instead:

    request.py       Responses body -> chat body (+ the fields the answer echoes), or a 400;
                     its pieces: items.py (input items -> messages), parts.py (content
                     parts), tools.py (tools, tool_choice), params.py (reasoning, text,
                     logprobs, truncation), fields.py (the refusals and the key check)
    answer.py        chat completion -> Responses object (what of it is carried, and why not)
    outputs.py       the output items and parts (message, reasoning, function_call, logprobs)
    events.py        chat SSE chunks -> Responses stream events, items in generation order
    stream_items.py  one streamed item's events (opening, deltas, closing)
    sse.py           SSE bytes -> data payloads; an event -> SSE bytes
    store.py         nothing is stored: bridged ids (resp_bridge_...) and their lookups

The I/O (sending, reading, streaming back) lives in `relay.py`.
May import: `errors` and `naming` (what an audio part names); `relay.py` also `upstream`.
Never the references or the pipeline.
"""

from .answer import ResponseIds, chat_to_response
from .events import ChatStreamTranslator
from .request import UNSUPPORTED, BridgedRequest, carries_audio_parts, responses_to_chat
from .sse import SSEDecoder, encode_event
from .store import is_bridged_id, refuse_bridged_previous, refuse_lookup

__all__ = [
    "UNSUPPORTED",
    "BridgedRequest",
    "ChatStreamTranslator",
    "ResponseIds",
    "SSEDecoder",
    "carries_audio_parts",
    "chat_to_response",
    "encode_event",
    "is_bridged_id",
    "refuse_bridged_previous",
    "refuse_lookup",
    "responses_to_chat",
]
