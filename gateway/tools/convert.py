"""`audio-gateway convert`: inline audio -> paths (`--extract-to`), paths -> inline (`--inline`).

Both run the gateway's own `RewritePipeline` on each row's request, so what they write cannot
drift from what `serve` sends: `--inline` writes the pipeline's upstream body; `--extract-to`
converts a row only when the pipeline, serving the converted row from the clip directory,
produces the same upstream body as for the original row. Rows stream one at a time into a
temporary file next to OUT, renamed over OUT at the end. The event loop here drives one row
at a time and serves no one else, so the plain file writes on it delay nothing.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import AsyncIterator
from contextlib import closing
from dataclasses import dataclass
from typing import IO, Any

import msgspec

from ..body import SegmentedPayload
from ..config import Config
from ..errors import GatewayError
from ..metrics import GatewayMetrics
from ..pipeline import RewritePipeline, build_pipeline
from ..referenced_body import ReferencedBody
from ..sidechannel import read_sidechannel
from .blobs import ClipDirectory, StagedClip
from .inline import InlineAudioFound, KeepInline, find_inline_audio, with_paths
from .jsonl import AtomicFile, Line, UsageError, check_output_target, existing_inputs, read_lines
from .progress import Progress
from .rows import NEMO_GYM_KEY, RowRequest, parse_row, route_shape, row_error
from .summary import EXIT_CLEAN, EXIT_ROW_ERRORS, ConvertSummary, RowError, print_summary

TOOLS_CACHE_BYTES = 128 * 1024**2  # seeds of a clip sit on nearby rows: a small cache serves them
UNCHANGED, CONVERTED, KEPT_INLINE, FAILED = "unchanged", "converted", "kept_inline", "error"


@dataclass(frozen=True, slots=True)
class RowOutcome:
    status: str
    clips: int = 0
    error: RowError | None = None


async def run_convert(args: argparse.Namespace, config: Config) -> int:
    (source,) = existing_inputs([args.input])
    check_output_target(source, args.output, args.force)
    if args.extract_to:
        clip_dir = os.path.abspath(args.extract_to)
        _make_clip_dir(clip_dir)
        config = config.with_overrides(audio={"root": clip_dir, "allowed_roots": []})
    pipeline = await _pipeline(config)
    converter: RowConverter = (
        Extractor(config, pipeline, ClipDirectory(clip_dir))
        if args.extract_to
        else Inliner(config, pipeline)
    )
    try:
        summary = await convert_file(source, args.output, converter, strict=args.strict)
    finally:
        pipeline.resolver.close()
    print_summary(summary.to_json() if args.json else summary.render())
    return EXIT_ROW_ERRORS if summary.errors.rows else EXIT_CLEAN


async def convert_file(
    source: str, target: str, converter: RowConverter, *, strict: bool
) -> ConvertSummary:
    """Convert every row of `source` into `target` (atomically); with `strict`, stop at the
    first row error and leave `target` untouched."""
    summary = ConvertSummary(converter.direction, source, target)
    started = time.perf_counter()
    with (
        AtomicFile(target) as out,
        closing(Progress(os.path.getsize(source), "convert")) as progress,
    ):
        for line in read_lines(source):
            progress.advance(len(line.data))
            if line.blank:  # not a row: kept as it is, as check skips it
                out.handle.write(line.data)
                summary.bytes_in += len(line.data)
                continue
            outcome = await converter.convert(line, out.handle)
            summary.add(outcome.status, outcome.clips, outcome.error, len(line.data))
            if strict and outcome.error is not None:
                summary.stopped = True
                break
        summary.bytes_out = out.handle.tell()
        if not summary.stopped:
            out.commit()
    summary.seconds = time.perf_counter() - started
    summary.files_written, summary.clip_bytes_written = converter.files_written
    return summary


class RowConverter:
    """One direction of `convert`: writes each row's output line to `out`."""

    direction = ""

    def __init__(self, config: Config, pipeline: RewritePipeline) -> None:
        self.config = config
        self.pipeline = pipeline

    @property
    def files_written(self) -> tuple[int, int]:
        """Clip files this run created, and their bytes."""
        return 0, 0

    async def convert(self, line: Line, out: IO[bytes]) -> RowOutcome:
        found: RowRequest | None = None
        start = out.tell()
        try:
            found = parse_row(line.data)
            return await self.convert_row(line, found, out)
        except GatewayError as error:
            out.seek(start)
            out.truncate()
            out.write(line.data)  # a failed row is copied unchanged
            return RowOutcome(FAILED, error=row_error(line, found, error))

    async def convert_row(self, line: Line, found: RowRequest, out: IO[bytes]) -> RowOutcome:
        raise NotImplementedError

    async def upstream_body(self, raw: bytes, found: RowRequest) -> bytes | SegmentedPayload:
        """What the gateway sends upstream for this request (`raw` when it forwards it as is)."""
        body = await self.pipeline.rewrite(raw, route_shape(found, self.config, bridge=False))
        assert not isinstance(body, ReferencedBody)  # route_shape's shapes carry every clip
        return body


class Inliner(RowConverter):
    """Paths -> the body the gateway would send upstream (the splice applied, the sidechannel
    removed); a NeMo Gym row gets that body as its `responses_create_params`."""

    direction = "inline"

    async def convert_row(self, line: Line, found: RowRequest, out: IO[bytes]) -> RowOutcome:
        audio = self.config.audio
        sidechannel = read_sidechannel(found.request, audio.max_clips, audio.max_file_bytes)
        if sidechannel is None:
            out.write(line.data)
            return RowOutcome(UNCHANGED)
        body = await self.upstream_body(found.encoded_request(line.data), found)
        assert isinstance(body, SegmentedPayload)  # a sidechannel is always spliced
        try:
            prefix, suffix = _around_request(found)
            out.write(prefix)
            async for piece in _pieces(body):  # a big clip never sits in memory whole
                out.write(piece)
            out.write(suffix + b"\n")
        finally:
            await body.aclose()
        return RowOutcome(CONVERTED, clips=len(sidechannel.clips))


class Extractor(RowConverter):
    """Inline audio -> clip files; a row converts only when the gateway would send the same."""

    direction = "extract"

    def __init__(self, config: Config, pipeline: RewritePipeline, clips: ClipDirectory) -> None:
        super().__init__(config, pipeline)
        self.clip_dir = clips

    @property
    def files_written(self) -> tuple[int, int]:
        return self.clip_dir.files_written, self.clip_dir.bytes_written

    async def convert_row(self, line: Line, found: RowRequest, out: IO[bytes]) -> RowOutcome:
        audio = self.config.audio
        raw = found.encoded_request(line.data)
        sidechannel = read_sidechannel(found.request, audio.max_clips, audio.max_file_bytes)
        try:
            inline = find_inline_audio(found, sidechannel)
        except KeepInline:
            out.write(line.data)
            return RowOutcome(KEPT_INLINE)
        if inline is None:
            out.write(line.data)
            return RowOutcome(UNCHANGED)
        expected = await self._expected(raw, found, sidechannel is not None)
        staged = self._stage(inline)
        converted = None
        try:
            if staged is not None:
                converted = await self._verified(found, inline, staged, expected)
        finally:  # an interrupt leaves no staged clip behind either
            for clip in staged or []:
                (self.clip_dir.commit if converted is not None else self.clip_dir.discard)(clip)
        if converted is None:
            out.write(line.data)
            return RowOutcome(KEPT_INLINE)
        out.write(msgspec.json.encode(converted) + b"\n")
        return RowOutcome(CONVERTED, clips=len(inline.clips))

    async def _expected(self, raw: bytes, found: RowRequest, has_sidechannel: bool) -> Any:
        """What vLLM receives for the original row (parsed). Errors here are the row's."""
        if not has_sidechannel:
            return found.request
        return msgspec.json.decode(await _joined(await self.upstream_body(raw, found)))

    def _stage(self, inline: InlineAudioFound) -> list[StagedClip] | None:
        staged: list[StagedClip] = []
        for clip in inline.clips:
            one = self.clip_dir.stage(clip.data, clip.mime)
            if one is None:  # not an audio container the gateway would read from a file
                for done in staged:
                    self.clip_dir.discard(done)
                return None
            staged.append(one)
        return staged

    async def _verified(
        self, found: RowRequest, inline: InlineAudioFound, staged: list[StagedClip], expected: Any
    ) -> dict[str, Any] | None:
        """The converted row when the gateway sends `expected` for it, else None."""
        readable = [clip.staged or clip.path for clip in staged]
        probe = msgspec.json.encode(with_paths(found, inline, readable))
        try:
            body = msgspec.json.decode(await _joined(await self.upstream_body(probe, found)))
        except GatewayError:
            return None  # e.g. more clips than audio.max_clips once they are paths
        if body != expected:
            return None
        request = with_paths(found, inline, [clip.path for clip in staged])
        if not found.nested:
            return request
        return {**found.row, NEMO_GYM_KEY: request}


async def _pipeline(config: Config) -> RewritePipeline:
    """The server's pipeline for `config`: its path policy, object sources and splice, with
    a smaller cache."""
    cache = config.cache.model_copy(
        update={"max_bytes": min(config.cache.max_bytes, TOOLS_CACHE_BYTES)}
    )
    return await build_pipeline(config, GatewayMetrics(), cache)


def _make_clip_dir(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--extract-to {path}: {exc.strerror}") from exc


async def _joined(body: bytes | SegmentedPayload) -> bytes:
    if isinstance(body, bytes):
        return body
    try:
        return b"".join([piece async for piece in _pieces(body)])
    finally:
        await body.aclose()


async def _pieces(body: SegmentedPayload) -> AsyncIterator[bytes]:
    """The body's bytes in order; a streamed clip is read and encoded chunk by chunk."""
    for segment in body.segments:
        if isinstance(segment, bytes):
            yield segment
        else:
            async for chunk in segment.chunks():
                yield chunk


def _around_request(found: RowRequest) -> tuple[bytes, bytes]:
    """The row's bytes before and after its request (both empty unless it is nested)."""
    if not found.nested:
        return b"", b""
    marker = f"@@audio-gateway-request-{os.urandom(8).hex()}@@"
    text = msgspec.json.encode({**found.row, NEMO_GYM_KEY: marker})
    prefix, _, suffix = text.partition(f'"{marker}"'.encode())
    return prefix, suffix
