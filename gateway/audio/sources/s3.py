"""The object-store client: HEAD identity, GET streams and presigned URLs, through obstore.

One `obstore` S3Store per allowed bucket, built at start-up. Credentials are the library's:
the standard AWS environment variables, web identity (IRSA) and container/instance metadata,
and, when boto3 is installed, everything botocore finds (shared config and credentials files,
profiles, SSO). They never come from the gateway's config and never appear in its messages.

Every request is bounded by `timeout_seconds` (a HEAD; a GET until its first chunk, then each
silence between chunks) and by `max_concurrency` requests in flight; store failures become the
gateway's 403 (AccessDenied) / 404 / 409 / 502 / 504 here, in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import obstore
from obstore.exceptions import NotFoundError, PreconditionError
from obstore.store import S3Store

from ...config import S3Config
from ...errors import (
    AudioFileChanged,
    AudioNotFound,
    AudioOutsideRoots,
    AudioStorageError,
    AudioStorageTimeout,
)
from ...metrics import GatewayMetrics
from ...naming.object_names import ObjectName
from ...naming.sidechannel import PathAudio

if TYPE_CHECKING:
    from obstore import GetOptions

log = logging.getLogger("gateway.sources.s3")  # named before the move: log filters key on it

ACCESS_DENIED = "AccessDenied"  # the store's code for credentials that may not read an object
_STORE_CODE = re.compile(r"<Code>([A-Za-z0-9.]+)</Code>")
_HTTP_STATUS = re.compile(r"status code: (\d{3}(?: [A-Za-z ]+)?)")


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a HEAD said: the object's identity (bucket, key, ETag, size)."""

    name: ObjectName
    etag: str  # "" when the store keeps none: then nothing but the size tells versions apart
    size: int

    @property
    def cache_key(self) -> tuple[str, str, str, str, int]:
        return ("s3", self.name.bucket, self.name.key, self.etag, self.size)


class S3Client:
    """HEAD, GET and presign on the allowed buckets, with timeouts, a concurrency bound,
    metrics, and the store's errors translated."""

    def __init__(self, config: S3Config, buckets: tuple[str, ...], metrics: GatewayMetrics):
        self.timeout = config.timeout_seconds
        self.presign_for = timedelta(seconds=config.presign_seconds)
        self._stores = {bucket: _store(config, bucket) for bucket in buckets}
        self._slots = asyncio.Semaphore(config.max_concurrency)
        self._metrics = metrics

    async def head(self, name: ObjectName, ref: PathAudio) -> ObjectInfo:
        try:
            async with self._request("head", name, ref):
                meta = await obstore.head_async(self._stores[name.bucket], name.key)
        except AudioStorageError:
            # A HEAD's error has no body to name the store's code (InvalidAccessKeyId, ...):
            # a one-byte GET asks again, and its error, code included, is the one raised.
            await self.read(ObjectInfo(name, "", 1), ref, 1)
            raise
        return ObjectInfo(name, meta["e_tag"] or "", int(meta["size"]))

    async def read(self, info: ObjectInfo, ref: PathAudio, length: int | None = None) -> bytes:
        """The object's first `length` bytes (all of them when None), in one buffer."""
        chunks = [bytes(chunk) async for chunk in self.stream(info, ref, length)]
        return b"".join(chunks)

    async def stream(
        self, info: ObjectInfo, ref: PathAudio, length: int | None = None, chunk_bytes: int = 0
    ) -> AsyncGenerator[memoryview, None]:
        """The object's bytes (its first `length` when given) as they arrive, in chunks of at
        least `chunk_bytes` but the last; 409 when the object is no longer the version the
        HEAD saw (the GET is conditional on its ETag)."""
        options: GetOptions = {"if_match": info.etag} if info.etag else {}
        if length is not None:
            options["range"] = (0, min(length, info.size))
        started = time.perf_counter()
        async with self._request("get", info.name, ref, record=False):
            store = self._stores[info.name.bucket]
            result = await obstore.get_async(store, info.name.key, options=options)
            chunks = result.stream(min_chunk_size=max(chunk_bytes, 1))
            first = await anext(chunks, None)
        outcome = "error"
        try:
            if first is not None:
                yield memoryview(first)
            while True:
                with self._translated("get", info.name, ref):
                    async with asyncio.timeout(self.timeout):
                        chunk = await anext(chunks, None)
                if chunk is None:
                    break
                yield memoryview(chunk)
            outcome = "ok"
        finally:
            self._metrics.observe_storage("get", outcome, time.perf_counter() - started)

    async def presign(self, name: ObjectName, ref: PathAudio) -> str:
        """A GET URL for `name`, valid for `presign_seconds`, signed with the gateway's
        credentials (no request to the store; fetching credentials may make one)."""
        with self._translated("presign", name, ref):
            async with asyncio.timeout(self.timeout):
                return await obstore.sign_async(
                    self._stores[name.bucket], "GET", name.key, self.presign_for
                )

    @contextlib.asynccontextmanager
    async def _request(
        self, op: str, name: ObjectName, ref: PathAudio, *, record: bool = True
    ) -> AsyncIterator[None]:
        """One bounded request: a concurrency slot, the timeout, the error translation and,
        with `record`, its metrics (a GET records itself once its body is read)."""
        started = time.perf_counter()
        outcome = "error"
        try:
            async with self._slots:
                with self._translated(op, name, ref):
                    async with asyncio.timeout(self.timeout):
                        yield
            outcome = "ok"
        except AudioNotFound:
            outcome = "not_found"
            raise
        except AudioStorageTimeout:
            outcome = "timeout"
            raise
        except AudioFileChanged:
            outcome = "changed"
            raise
        finally:
            if record or outcome != "ok":
                self._metrics.observe_storage(op, outcome, time.perf_counter() - started)

    @contextlib.contextmanager
    def _translated(self, op: str, name: ObjectName, ref: PathAudio) -> Iterator[None]:
        """The store's exceptions as the gateway's errors; the message keeps only the object
        URL and the store's error code (the library's text can carry request details)."""
        try:
            yield
        except TimeoutError:
            raise AudioStorageTimeout(
                f"{ref.label}: the object store did not answer a {op.upper()} of {name.url} "
                f"within {self.timeout:g} s (storage.s3.timeout_seconds)",
                param=ref.param,
                code="audio_storage_timeout",
            ) from None
        except (NotFoundError, FileNotFoundError):
            raise AudioNotFound(
                f"{ref.label}: audio object {ref.given!r} ({name.url}) does not exist",
                param=ref.param,
                code="audio_not_found",
            ) from None
        except PreconditionError:
            raise AudioFileChanged(
                f"{ref.label}: {ref.given!r} ({name.url}) changed while it was being read; "
                "retry the request",
                param=ref.param,
                code="audio_file_changed",
            ) from None
        except Exception as exc:
            code = store_error_code(str(exc)) or type(exc).__name__
            if code == ACCESS_DENIED:  # as EACCES on a file: a lasting 403, not the store failing
                raise AudioOutsideRoots(
                    f"{ref.label}: audio object {ref.given!r} ({name.url}) cannot be read: "
                    f"the object store denied access ({code}): the gateway's credentials may "
                    "not read it",
                    param=ref.param,
                    code="audio_path_forbidden",
                ) from None
            log.warning("object store %s of %s failed: %s", op.upper(), name.url, code)
            raise AudioStorageError(
                f"{ref.label}: the object store refused a {op.upper()} of {name.url}: {code}",
                param=ref.param,
                code="audio_storage_error",
            ) from None


def store_error_code(text: str) -> str | None:
    """The S3 error code in a failure's text (`AccessDenied`, `InvalidAccessKeyId`, ...), else
    its HTTP status (a HEAD's error has no body), else None."""
    match = _STORE_CODE.search(text)
    if match:
        return match.group(1)
    match = _HTTP_STATUS.search(text)
    return f"HTTP {match.group(1).strip()}" if match else None


def _store(config: S3Config, bucket: str) -> S3Store:
    """The store of one bucket. Retries stay inside the timeout: obstore's own retry budget
    (3 minutes by default) would outlast every client."""
    timeout = timedelta(seconds=config.timeout_seconds)
    options: dict[str, Any] = {
        "config": _aws_settings(config),
        "client_options": {
            "allow_http": config.allow_http,
            "connect_timeout": timeout,
            "read_timeout": timeout,
            "timeout": timedelta(hours=1),  # whole-request bound: a big GET streams for long
        },
        "retry_config": {"max_retries": 2, "retry_timeout": timeout},
    }
    provider = _botocore_credentials()
    if provider is not None:
        options["credential_provider"] = provider
    return S3Store(bucket, **options)


def _aws_settings(config: S3Config) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    if config.endpoint_url:
        settings["endpoint"] = config.endpoint_url
    if config.region:
        settings["region"] = config.region
    return settings


# Credential sources obstore (the Rust object_store) resolves by itself.
_NATIVE_CREDENTIAL_METHODS = ("env", "iam-role", "container-role", "assume-role-with-web-identity")


def _botocore_credentials() -> Any:
    """botocore's credential chain when boto3 is installed and finds credentials obstore's
    own chain would miss (shared credentials/config files, profiles, SSO, processes); else
    None. Blocking (botocore may ask the instance metadata service): call it off the loop."""
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return None  # the environment wins in both chains; no need for botocore
    try:
        import boto3
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError:
        return None
    session = boto3.Session()
    credentials = session.get_credentials()
    if credentials is None or credentials.method in _NATIVE_CREDENTIAL_METHODS:
        return None
    return Boto3CredentialProvider(session)
