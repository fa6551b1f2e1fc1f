"""The TOML configuration, validated by frozen pydantic models.

Unknown keys are errors naming the key; sizes are integers of bytes or strings like "25MiB".
API keys are `SecretStr`s: no repr, dump or error message shows them.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .affinity.headers import check_header_names
from .naming.content_parts import PartRoots
from .naming.object_names import MalformedName, ObjectPrefix, is_object_url, parse_prefix
from .naming.sidechannel import KEY_PREFIX_PATTERN
from .origin import OriginError, UpstreamOrigin, parse_origin

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
}
_SIZE_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_byte_size(value: Any) -> Any:
    """Turn "25MiB" / "64 MB" / 1024 into a byte count; anything else is left to pydantic."""
    if isinstance(value, str):
        match = _SIZE_PATTERN.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _SIZE_UNITS:
            raise ValueError(f"not a size: {value!r} (use bytes or e.g. '25MiB', '64MB', '1GiB')")
        return int(float(match.group(1)) * _SIZE_UNITS[unit])
    return value


ByteSize = Annotated[int, BeforeValidator(parse_byte_size), Field(ge=0)]
# A duration in seconds, 0 or more: a TOML integer or float, never a string, bool or inf/nan.
Seconds = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]

MAX_WORKERS = 64
API_KEYS_ENV = "AUDIO_GATEWAY_API_KEYS"  # comma-separated; added to server.api_keys
UPSTREAM_API_KEY_ENV = "AUDIO_GATEWAY_UPSTREAM_API_KEY"  # replaces upstream.api_key
# Printable ASCII minus space (a Bearer credential has none) and comma (the env separator).
_KEY_PATTERN = re.compile(r"[\x21-\x2b\x2d-\x7e]+")


def _check_api_key(key: SecretStr) -> SecretStr:
    """A key a client can send in `Authorization: Bearer <key>`; the error never shows it."""
    if not _KEY_PATTERN.fullmatch(key.get_secret_value()):
        raise ValueError("an API key must be non-empty printable ASCII without spaces or commas")
    return key


def _check_optional_api_key(key: SecretStr) -> SecretStr:
    return _check_api_key(key) if key.get_secret_value() else key


ApiKey = Annotated[SecretStr, AfterValidator(_check_api_key)]
OptionalApiKey = Annotated[SecretStr, AfterValidator(_check_optional_api_key)]


class _Section(BaseModel):
    # hide_input_in_errors: a ValidationError printed anywhere must not show an API key.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class ServerConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: ByteSize = 64 * 1024**2
    access_log: bool = False
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    malloc_tuning: bool = True
    api_keys: list[ApiKey] = []
    # SIGTERM: keep serving new connections this long (endpoints get withdrawn meanwhile), then
    # give what is in flight up to shutdown_timeout_seconds before cutting it (README, Deploying).
    drain_seconds: Seconds = 0.0
    shutdown_timeout_seconds: Seconds = 60.0
    log_format: Literal["text", "json"] = "text"
    # Serving processes sharing the port (SO_REUSEPORT, Linux): gateway/workers.
    workers: int = Field(1, ge=1, le=MAX_WORKERS, strict=True)


class UpstreamConfig(_Section):
    url: str = "http://127.0.0.1:8000"
    ca_file: str = ""
    connect_timeout_seconds: float = Field(10.0, gt=0)
    read_timeout_seconds: float = Field(600.0, gt=0)
    max_connections: int = Field(512, ge=0)
    api_key: OptionalApiKey = SecretStr("")

    @field_validator("url")
    @classmethod
    def _origin(cls, url: str) -> str:
        try:
            parse_origin(url)
        except OriginError as exc:
            raise ValueError(str(exc)) from None
        return url.rstrip("/") if not url.startswith("unix:") else url

    @field_validator("ca_file")
    @classmethod
    def _ca_file_absolute(cls, ca_file: str) -> str:
        if ca_file and not Path(ca_file).is_absolute():
            raise ValueError("must be an absolute path to a PEM file of CA certificates")
        return ca_file

    def origin(self) -> UpstreamOrigin:
        return parse_origin(self.url, self.ca_file)


class AudioConfig(_Section):
    root: str = ""
    allowed_roots: list[str] = []
    max_file_bytes: ByteSize = 25 * 1024**2
    max_clips: int = Field(16, ge=1)
    max_duration_seconds: float = Field(600.0, gt=0)
    max_decode_bytes: ByteSize = 256 * 1024**2
    resolver_threads: int = Field(1, ge=1, le=64)

    @field_validator("root")
    @classmethod
    def _root_absolute(cls, root: str) -> str:
        if root and not (Path(root).is_absolute() or _object_prefix(root)):
            raise ValueError(
                "must be an absolute directory path, an s3://bucket/prefix/ "
                "(or '' to refuse relative paths)"
            )
        return root

    @field_validator("allowed_roots")
    @classmethod
    def _roots_absolute(cls, roots: list[str]) -> list[str]:
        for root in roots:
            if not (Path(root).is_absolute() or _object_prefix(root)):
                raise ValueError(f"{root!r} is not an absolute directory path or s3:// prefix")
        return roots

    def effective_roots(self) -> list[str]:
        """The local directories of `allowed_roots`, defaulting to `[root]`; empty means no
        local path is accepted."""
        return [root for root in self._all_roots() if not is_object_url(root)]

    def local_root(self) -> str:
        """`root` when it is a local directory, else `""`."""
        return "" if is_object_url(self.root) else self.root

    def object_root(self) -> ObjectPrefix | None:
        return parse_prefix(self.root) if is_object_url(self.root) else None

    def object_roots(self) -> tuple[ObjectPrefix, ...]:
        """The object prefixes of `allowed_roots`, defaulting to `[root]`."""
        return tuple(parse_prefix(root) for root in self._all_roots() if is_object_url(root))

    def has_root(self) -> bool:
        """Whether any path can be admitted: `root` or `allowed_roots` is set."""
        return bool(self.root or self.allowed_roots)

    def _all_roots(self) -> list[str]:
        if self.allowed_roots:
            return list(self.allowed_roots)
        return [self.root] if self.root else []


def _object_prefix(url: str) -> bool:
    """Whether `url` is a well-formed `s3://bucket/prefix/` (ValueError naming why if not)."""
    if not is_object_url(url):
        return False
    try:
        parse_prefix(url)
    except MalformedName as exc:
        raise ValueError(f"{url!r} {exc}") from None
    return True


class CacheConfig(_Section):
    max_bytes: ByteSize = 1024**3
    max_item_bytes: ByteSize = 64 * 1024**2


REFERENCE_WAIT_MS = 100  # measured against the stub: README, "Repeated clips by reference"


class SpliceConfig(_Section):
    mode: Literal["data_uri", "file_url"] = "data_uri"
    chat_part: Literal["audio_url", "input_audio"] = "audio_url"
    part_uuid: bool = False
    remote: Literal["data_uri", "presigned_url"] = "data_uri"
    # "reference": a clip this upstream already holds goes as its uuid alone (references/held.py).
    repeats: Literal["data", "reference"] = "data"
    reference_max_clips: int = Field(100_000, ge=1, le=100_000_000)
    reference_wait_ms: int = Field(REFERENCE_WAIT_MS, ge=0, le=600_000)
    # When references stop paying for one model (references/models.py): the share of misses
    # right after a clip's data was accepted that switches it to data, and when to try again.
    reference_miss_ratio: float = Field(0.25, gt=0, le=1)
    reference_retry_seconds: int = Field(300, ge=60, le=86_400)


class S3Config(_Section):
    """The S3 (or S3-compatible) store; credentials come from the standard AWS sources."""

    endpoint_url: str = ""
    region: str = ""
    allow_http: bool = False
    timeout_seconds: float = Field(30.0, gt=0)
    max_concurrency: int = Field(64, ge=1)
    revalidate: bool = True
    presign_seconds: int = Field(3600, ge=1, le=7 * 24 * 3600)  # SigV4 allows up to 7 days

    @model_validator(mode="after")
    def _plain_http_is_explicit(self) -> S3Config:
        # Caught here, at start-up: the store client would only fail each request, vaguely.
        if self.endpoint_url.lower().startswith("http://") and not self.allow_http:
            raise ValueError(
                "endpoint_url is plain http://: set storage.s3.allow_http = true to use it"
            )
        return self


class StorageConfig(_Section):
    s3: S3Config = S3Config()


class ResponsesConfig(_Section):
    audio: Literal["chat_bridge", "input_audio"] = "chat_bridge"


class SidechannelConfig(_Section):
    key_prefix: str = ""  # the sidechannel keys are key_prefix + "audio_path" etc.
    # "resolve": chat audio_url parts naming a path are read by the gateway like audio_path;
    # "pass": relayed untouched, for a vLLM that reads the files itself.
    content_parts: Literal["resolve", "pass"] = "resolve"

    @field_validator("key_prefix")
    @classmethod
    def _plain_fragment(cls, prefix: str) -> str:
        if not KEY_PREFIX_PATTERN.fullmatch(prefix):
            raise ValueError(
                f"{prefix!r} is not a plain key fragment: use only A-Z a-z 0-9 _ . - "
                "(e.g. 'gateway_'), or '' for the plain keys"
            )
        return prefix


class ChunkingConfig(_Section):
    """`[chunking]`: audio longer than the model's window is cut into pieces (gateway.chunking).

    Pieces are at most `max_chunk_seconds`, which must fit the model's window, so it may not
    exceed `threshold_seconds` (a clip at most that long is sent whole)."""

    enabled: bool = False
    threshold_seconds: float = Field(30.0, gt=0)
    max_chunk_seconds: float = Field(30.0, gt=0)
    min_tail_seconds: float = Field(0.5, ge=0)
    split: Literal["quiet", "fixed"] = "quiet"
    quiet_search_seconds: float = Field(5.0, gt=0)
    max_concurrent_chunks: int = Field(4, ge=1)
    join: str = " "

    # Field validators (not one model validator) so that an error's location is the key.
    @field_validator("max_chunk_seconds")
    @classmethod
    def _piece_fits_threshold(cls, seconds: float, info: ValidationInfo) -> float:
        threshold = info.data.get("threshold_seconds")
        if threshold is not None and seconds > threshold:
            raise ValueError(
                f"{seconds:g} exceeds threshold_seconds ({threshold:g}): a clip between the two "
                "would be sent whole although longer than a piece may be"
            )
        return seconds

    @field_validator("min_tail_seconds", "quiet_search_seconds")
    @classmethod
    def _below_piece(cls, seconds: float, info: ValidationInfo) -> float:
        longest = info.data.get("max_chunk_seconds")
        if longest is not None and seconds >= longest:
            raise ValueError(f"{seconds:g} must be below max_chunk_seconds ({longest:g})")
        return seconds


class NormalizeConfig(_Section):
    """`[normalize]`: clips the gateway reads go upstream at the model's rate, channel count and
    sample format, as WAV (gateway.normalize). `channels = 0` keeps a clip's own count."""

    enabled: bool = False
    sample_rate: int = Field(16_000, ge=8_000, le=192_000, strict=True)
    channels: int = Field(1, ge=0, le=8, strict=True)
    sample_format: Literal["PCM_16", "FLOAT"] = "PCM_16"


class RoutingConfig(_Section):
    """`[routing]`: for a router in front of many vLLM replicas (gateway.affinity)."""

    # Set to the clip key on every request with audio (e.g. ["X-Session-ID"]).
    affinity_headers: list[str] = []

    @field_validator("affinity_headers")
    @classmethod
    def _header_names(cls, names: list[str]) -> list[str]:
        check_header_names(names)
        return names


# What `/v1/audio/translations` does for a model: translates into the language asked
# (`to_language`), into English only, answers a transcription of the source language, is not
# served (no transcriptions), or not known.
Translations = Literal["translates", "english", "transcribes", "none", "unknown"]
PositiveSeconds = Annotated[float, Field(gt=0, strict=True, allow_inf_nan=False)]


class ModelConfig(_Section):
    """`[models."<served model name>"]`: the model's architecture (the HF `architectures`
    name) and any value of its profile replaced (gateway.models). An absent key keeps the
    profile's value."""

    architecture: str = ""
    window_seconds: PositiveSeconds | None = None
    max_clip_seconds: Seconds | None = None  # 0: no maximum (a clip is never cut)
    clips_per_prompt: Annotated[int, Field(ge=1, strict=True)] | None = None
    sample_rate: Annotated[int, Field(ge=8_000, le=192_000, strict=True)] | None = None
    accepts_stereo: StrictBool | None = None
    accepts_uuid_only_parts: StrictBool | None = None
    chat: StrictBool | None = None
    transcriptions: StrictBool | None = None
    translations: Translations | None = None

    def overrides(self) -> dict[str, Any]:
        """The profile values this table replaces (every key set but `architecture`)."""
        return {
            name: getattr(self, name)
            for name in type(self).model_fields
            if name != "architecture" and getattr(self, name) is not None
        }


class PlacementConfig(_Section):
    """`[placement]`: finding a served model's architecture where no `[models."<name>"]
    architecture` names it (gateway.models.placement)."""

    ask_upstream: bool = True
    read_model_dirs: bool = True
    retry_seconds: float = Field(300.0, gt=0, strict=True, allow_inf_nan=False)


class Config(_Section):
    server: ServerConfig = ServerConfig()
    upstream: UpstreamConfig = UpstreamConfig()
    audio: AudioConfig = AudioConfig()
    cache: CacheConfig = CacheConfig()
    splice: SpliceConfig = SpliceConfig()
    responses: ResponsesConfig = ResponsesConfig()
    storage: StorageConfig = StorageConfig()
    sidechannel: SidechannelConfig = SidechannelConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    normalize: NormalizeConfig = NormalizeConfig()
    routing: RoutingConfig = RoutingConfig()
    models: dict[str, ModelConfig] = {}
    placement: PlacementConfig = PlacementConfig()

    @model_validator(mode="after")
    def _objects_need_bytes_or_urls(self) -> Config:
        file_urls = self.splice.mode == "file_url" and self.splice.remote == "data_uri"
        if file_urls and self.audio.object_roots():
            raise ValueError(
                "splice.mode = 'file_url' sends no audio bytes, so s3:// roots need "
                "splice.remote = 'presigned_url'"
            )
        return self

    def content_part_roots(self) -> PartRoots | None:
        """What the roots let chat content parts name; None with `[sidechannel]
        content_parts = "pass"` (the parts are not read at all)."""
        if self.sidechannel.content_parts != "resolve":
            return None
        return PartRoots(any_root=self.audio.has_root(), relative_root=bool(self.audio.root))

    def with_overrides(self, **sections: dict[str, Any]) -> Config:
        """A copy with some keys replaced, validated like the file (used by CLI flags)."""
        data = self.model_dump()
        for section, values in sections.items():
            data[section].update({k: v for k, v in values.items() if v is not None})
        return Config.model_validate(data)

    def with_environment(self, environ: Mapping[str, str]) -> Config:
        """A copy with the secrets kept out of files: `AUDIO_GATEWAY_API_KEYS` (comma-separated)
        extends `server.api_keys`; `AUDIO_GATEWAY_UPSTREAM_API_KEY` overrides `upstream.api_key`."""
        added = [key.strip() for key in environ.get(API_KEYS_ENV, "").split(",") if key.strip()]
        return self.with_overrides(
            server={"api_keys": [*self.server.api_keys, *added] if added else None},
            upstream={"api_key": environ.get(UPSTREAM_API_KEY_ENV) or None},
        )


class ConfigError(Exception):
    """A config file that cannot be used; the message names the key and the reason."""


def describe_validation_error(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        loc = [str(part) for part in item["loc"]]
        if len(loc) > 1 and loc[0] == "models":  # a served name as TOML writes it
            loc[1] = f'"{loc[1]}"'
        key = ".".join(loc) or "(top level)"
        reason = "unknown key" if item["type"] == "extra_forbidden" else item["msg"]
        lines.append(f"{key}: {reason}")
    return "; ".join(lines)


def load_config(path: str | Path | None) -> Config:
    """Read and validate a TOML file; `None` gives the defaults."""
    if path is None:
        return Config()
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path} is not valid TOML: {exc}") from exc
    return validate_config(data, source=str(path))


def validate_config(data: dict[str, Any], source: str = "config") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {describe_validation_error(exc)}") from exc
