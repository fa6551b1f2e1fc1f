"""A vLLM-faithful stub upstream, for tests, `audio-gateway demo` and `bench/`.

Request parsing and limits follow vLLM 0.33's code; what comes back (statuses, error bodies,
headers, answer and stream fields, token ids, `vllm:mm_cache_*` on `/metrics`) follows vLLM
0.32.0 as it runs, held to it by tests/engine/test_stub_vs_engine.py (docs/stub-upstream.md).
It parses chat-completions and Responses bodies the way vLLM's OpenAI server does and refuses
what vLLM refuses: per-request `mm_processor_kwargs` / `media_io_kwargs` unless started as with
`--trust-request-mm-kwargs` (`mm_kwargs.py`), unknown content parts, non-audio MIME types, bad
base64, undecodable audio, an `input_audio.format` other than wav/mp3, audio over
VLLM_MAX_AUDIO_DECODE_DURATION_S or VLLM_MAX_AUDIO_DECODE_BYTES (read from its header as vLLM's
soundfile loader reads it), `file://` outside its allowed media path, http(s) hosts outside its
allowed media domains, non-string Responses metadata, and any audio part in Responses input
(unless `responses_accept_audio`). It fetches http(s) audio URLs as vLLM's MediaConnector does,
decodes every clip, and answers with what it got: per clip the sha256 of the decoded bytes,
MIME type, size, duration and sample rate. Chat answers honour `max_tokens` (a word a token)
and carry `reasoning` when the `X-Stub-Reasoning` header gives it; a named or `required`
`tool_choice` is answered with a call, as vLLM does (`tool_calls.py`). It streams SSE when
asked, speaks vLLM's realtime WebSocket (`/v1/realtime`, `realtime.py`), and reads the
speech-to-text routes' multipart forms as vLLM's FastAPI handler does (`speech.py`). It holds
clips by uuid as vLLM's multimodal processor cache does (`mm_cache.py`, `cache_control.py`:
uuid-only parts, the cache-miss 400, /pause /sleep /reset_mm_cache, engine drift), can stand
for several API servers each with its own cache (`api_servers.py`) and can
record the chat bodies it receives (`body_log.py`). It can pace its answers and write head
and body apart as vLLM does (`pacing.py`). Run alone with `python -m gateway.stub_upstream
--port 8000`; `/metrics` is `vllm_metrics.py`.
May import: nothing of the gateway (it stands in for vLLM); only `demo` and tests import it.
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
