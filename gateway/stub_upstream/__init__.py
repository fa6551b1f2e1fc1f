"""A vLLM-faithful stub upstream, for tests, `audio-gateway demo` and `bench/`.

It parses chat-completions and Responses bodies the way vLLM's OpenAI server does, rejects
what vLLM would reject (unknown content parts, non-audio MIME types, bad base64, undecodable
audio, `file://` outside its allowed media path, http(s) hosts outside its allowed media
domains, non-string Responses metadata), fetches http(s) audio URLs as vLLM's
MediaConnector does, decodes every clip, and answers with what it got: per clip the sha256
of the decoded bytes, MIME type, size, duration and sample rate. Streams SSE when asked.
Run alone with `python -m gateway.stub_upstream --port 8000`.
"""

from .app import create_stub_app, main, vllm_error
from .media import ClipReport, StubRejection, decode_audio
from .state import ReceivedRequest, StubState, stub_state_key

__all__ = [
    "ClipReport",
    "ReceivedRequest",
    "StubRejection",
    "StubState",
    "create_stub_app",
    "decode_audio",
    "main",
    "stub_state_key",
    "vllm_error",
]
