"""vLLM's speech-to-text routes, `/v1/audio/transcriptions` and `/v1/audio/translations`.

The form is read as vLLM 0.33's FastAPI handler reads it (`Annotated[TranscriptionRequest,
Form()]` over Starlette's parser): a part with a `filename` is a file, any other part a text
field of at most 1 MiB; a scalar field takes its last value, `timestamp_granularities[]` every
value; the fields are validated by pydantic in lax mode ("true" is a boolean, "0.5" a float);
`file` must be a file part. The audio is decoded, and the answer carries, besides vLLM's own
fields, `stub`: the clip (sha256, MIME type, duration), the file part's name and type, and the
form fields in the order they came. `stream` answers are vLLM's `*.chunk` SSE events.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .forms import FormError, FormItems, UploadedFile, parse_form
from .media import ClipReport, StubRejection, decode_audio
from .state import stub_state_key
from .wire import start_event_stream, vllm_json

MAX_FILE_BYTES = 25 * 1024 * 1024  # VLLM_MAX_AUDIO_CLIP_FILESIZE_MB
STREAM_OPTIONS = ("stream_include_usage", "stream_continuous_usage_stats")
SUPPORTED_FORMATS = ("text", "json", "verbose_json", "diarized_json")
Task = Literal["transcribe", "translate"]


class SpeechForm(BaseModel):
    """The fields of vLLM's TranscriptionRequest / TranslationRequest that the stub checks
    (`file` apart); unknown fields are allowed, as vLLM's OpenAIBaseModel allows them."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    model: str | None = None
    language: str | None = None
    prompt: str = ""
    response_format: Literal["json", "text", "srt", "verbose_json", "vtt", "diarized_json"] = "json"
    timestamp_granularities: list[Literal["word", "segment"]] = Field(
        default=[], alias="timestamp_granularities[]"
    )
    stream: bool | None = False
    stream_include_usage: bool | None = False
    stream_continuous_usage_stats: bool | None = False
    vllm_xargs: dict[str, Any] | None = None
    to_language: str | None = None
    use_beam_search: bool = False
    n: int = 1
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    max_completion_tokens: int | None = None

    @field_validator("vllm_xargs", mode="before")
    @classmethod
    def _xargs_json(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value


async def transcriptions(request: web.Request) -> web.StreamResponse:
    return await _speech(request, "transcribe")


async def translations(request: web.Request) -> web.StreamResponse:
    return await _speech(request, "translate")


def add_speech_routes(app: web.Application) -> None:
    app.router.add_post("/v1/audio/transcriptions", transcriptions)
    app.router.add_post("/v1/audio/translations", translations)


async def _speech(request: web.Request, task: Task) -> web.StreamResponse:
    try:
        items = parse_form(await request.read(), request.headers.get("Content-Type", ""))
    except FormError as exc:
        return _error(exc.message, 400)
    upload = _last(items, "file")
    if isinstance(upload, str):
        return _error("Expected 'file' to be a file-like object, not 'str'.", 422)
    if upload is None:
        return _error("1 validation error: body.file: Field required", 400, "body.file")
    try:
        form = SpeechForm.model_validate(_form_values(items, task))
    except ValidationError as exc:
        return _validation_error(exc)
    refusal = _refusal(form)
    if refusal is not None:
        return _error(*refusal)
    if len(upload.data) > MAX_FILE_BYTES:
        return _error("Maximum file size exceeded", 400, "audio_filesize_mb")
    try:
        clip = decode_audio(upload.data, "file", upload.content_type or "", None)
    except StubRejection:
        return _error("Invalid or unsupported audio file.", 400)
    report = _report(clip, upload, items, task)
    request.app[stub_state_key].audio_requests += 1
    request.app[stub_state_key].decodes += 1
    if form.stream:
        return await _stream(request, form, task, report)
    return vllm_json(_answer(form, task, report))


def _last(items: FormItems, name: str) -> str | UploadedFile | None:
    values = [value for key, value in items if key == name]
    return values[-1] if values else None


def _form_values(items: FormItems, task: Task) -> dict[str, Any]:
    """FastAPI's form extraction: scalars take their last value, declared list fields every
    value, an undeclared name given twice a list; `file` is checked apart."""
    values: dict[str, Any] = {}
    list_fields = {"timestamp_granularities[]"} if task == "transcribe" else set()
    for name, value in items:
        if name == "file":
            continue
        if name in list_fields or (name in values and name not in SpeechForm.model_fields):
            previous = values.get(name, [])
            values[name] = [*(previous if isinstance(previous, list) else [previous]), value]
        else:
            values[name] = value
    if task == "translate":
        values.pop("timestamp_granularities[]", None)  # no such field: extra, ignored
    return values


def _refusal(form: SpeechForm) -> tuple[str, int, str | None] | None:
    """What vLLM's serving code refuses before it decodes the audio."""
    given = [name for name in STREAM_OPTIONS if getattr(form, name)]
    if given and not form.stream:
        return "Stream options can only be defined when `stream=True`.", 400, given[0]
    if form.stream and form.use_beam_search:
        return "Streaming is not currently supported with beam search", 400, None
    if form.response_format not in SUPPORTED_FORMATS:
        return (
            "Currently only support response_format: "
            "`text`, `json`, `verbose_json` or `diarized_json`",
            400,
            None,
        )
    if form.response_format in ("verbose_json", "diarized_json") and form.stream:
        return f"{form.response_format} format doesn't support streaming case", 400, None
    return None


# --- answers -------------------------------------------------------------------------------------


def _report(clip: ClipReport, upload: UploadedFile, items: FormItems, task: Task) -> dict[str, Any]:
    return {
        "task": task,
        "clip": clip.to_json(),
        "filename": upload.filename,
        "content_type": upload.content_type,
        "fields": [[name, value] for name, value in items if isinstance(value, str)],
        "files": [name for name, value in items if isinstance(value, UploadedFile)],
    }


def _text(report: dict[str, Any]) -> str:
    clip = report["clip"]
    return f"{clip['container']} {clip['bytes']} B {clip['duration_seconds'] or 0:.2f} s"


def _answer(form: SpeechForm, task: Task, report: dict[str, Any]) -> dict[str, Any]:
    seconds = report["clip"]["duration_seconds"] or 0.0
    answer: dict[str, Any] = {"text": _text(report)}
    if form.response_format == "verbose_json":
        answer.update(duration=seconds, language=form.language, segments=[])
    elif task == "transcribe":
        answer["usage"] = {"type": "duration", "seconds": math.ceil(seconds)}
    answer["params"] = form.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return {**answer, "stub": report}


async def _stream(
    request: web.Request, form: SpeechForm, task: Task, report: dict[str, Any]
) -> web.StreamResponse:
    """vLLM's stream: one `*.chunk` event per delta, the last with its finish_reason, a usage
    event when asked, then `[DONE]`. `X-Stub-Hold: 1` pauses after the first event."""
    state = request.app[stub_state_key]
    response = await start_event_stream(request)
    kind = "transcription" if task == "transcribe" else "translation"
    base = {
        "id": f"{'trsc' if task == 'transcribe' else 'trsl'}-stub-{state.request_count}",
        "object": f"{kind}.chunk",
        "created": int(time.time()),
        "model": form.model or "stub-audio-model",
    }
    words = _text(report).split(" ")
    for index, word in enumerate(words):
        choice: dict[str, Any] = {"delta": {"content": word if index == 0 else " " + word}}
        if index == len(words) - 1:
            choice.update(finish_reason="stop", stop_reason=None)
        event = {**base, "choices": [choice], **({"stub": report} if index == 0 else {})}
        await response.write(f"data: {json.dumps(event)}\n\n".encode())
        if index == 0 and request.headers.get("X-Stub-Hold") == "1":
            await state.hold.wait()
    if form.stream_include_usage:
        usage = {
            "prompt_tokens": 1,
            "completion_tokens": len(words),
            "total_tokens": 1 + len(words),
        }
        await response.write(
            f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode()
        )
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    state.streams_finished += 1
    return response


def _validation_error(exc: ValidationError) -> web.Response:
    errors = exc.errors()
    param = ".".join(["body", *(str(part) for part in errors[0]["loc"])])
    lines = [f"  {param}: {error['msg']}" for error in errors]
    return _error(f"{len(errors)} validation error(s):\n" + "\n".join(lines), 400, param)


def _error(message: str, status: int, param: str | None = None) -> web.Response:
    """vLLM's error shape for FastAPI/validation errors: `type` is the status phrase."""
    phrase = {400: "Bad Request", 422: "Unprocessable Entity"}[status]
    body = {"error": {"message": message, "type": phrase, "param": param, "code": status}}
    return vllm_json(body, status=status)
