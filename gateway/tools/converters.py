"""The row converters of `audio-gateway convert`: one row in, its output line written.

`Inliner` and `Extractor` run the gateway's own `RewritePipeline` on each row's request, so what
they write cannot drift from what `serve` sends: `Inliner` writes the pipeline's upstream body;
`Extractor` converts a row only when the pipeline, serving the converted row from the clip
directory, produces the same upstream body as for the original row. Every converter writes the
sidechannel of the rows it keeps under `KeyRenaming.target` (`--to-key-prefix`); `Renamer` does
only that. The event loop here drives one row at a time and serves no one else, so the plain
file writes on it delay nothing.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import IO, Any

import msgspec

from ..config import Config
from ..errors import GatewayError
from ..naming.sidechannel import Sidechannel
from ..references.body import ReferencedBody
from ..request.pipeline import RewritePipeline
from ..upstream.body import SegmentedPayload
from .blobs import ClipDirectory, StagedClip
from .inline import InlineAudioFound, KeepInline, find_inline_audio, with_paths
from .jsonl import Line
from .prefix import KeyRenaming
from .results import RowError
from .rows import NEMO_GYM_KEY, RowRequest, parse_row, route_shape, row_error

UNCHANGED, CONVERTED, KEPT_INLINE, FAILED = "unchanged", "converted", "kept_inline", "error"


@dataclass(frozen=True, slots=True)
class RowOutcome:
    status: str
    clips: int = 0
    error: RowError | None = None


class RowConverter:
    """One direction of `convert`: writes each row's output line to `out`, with the row's
    sidechannel under `renaming.target`'s names."""

    direction = ""

    def __init__(self, config: Config, renaming: KeyRenaming) -> None:
        self.config = config
        self.renaming = renaming

    @property
    def files_written(self) -> tuple[int, int]:
        """Clip files this run created, and their bytes."""
        return 0, 0

    async def convert(self, line: Line, out: IO[bytes]) -> RowOutcome:
        found: RowRequest | None = None
        start = out.tell()
        try:
            found = parse_row(line.data)
            audio = self.config.audio
            sidechannel = self.renaming.source.read(
                found.request, audio.max_clips, audio.max_file_bytes
            )
            self.renaming.check(found.request, sidechannel)
            return await self.convert_row(line, found, sidechannel, out)
        except GatewayError as error:
            out.seek(start)
            out.truncate()
            out.write(line.data)  # a failed row is copied unchanged
            return RowOutcome(FAILED, error=row_error(line, found, error, self.renaming.source))

    async def convert_row(
        self, line: Line, found: RowRequest, sidechannel: Sidechannel | None, out: IO[bytes]
    ) -> RowOutcome:
        raise NotImplementedError

    def write_kept(
        self, line: Line, found: RowRequest, sidechannel: Sidechannel | None, out: IO[bytes]
    ) -> None:
        """A row whose audio stays as it is: byte for byte, unless its key is renamed."""
        if sidechannel is None or not self.renaming.active:
            out.write(line.data)
            return
        request = self.renaming.renamed(found.request, sidechannel)
        out.write(msgspec.json.encode(found.row_with(request)) + b"\n")


class Renamer(RowConverter):
    """`--to-key-prefix` alone: the sidechannel's key renamed, nothing else touched."""

    direction = "key_prefix"

    async def convert_row(
        self, line: Line, found: RowRequest, sidechannel: Sidechannel | None, out: IO[bytes]
    ) -> RowOutcome:
        self.write_kept(line, found, sidechannel, out)
        if sidechannel is None:
            return RowOutcome(UNCHANGED)
        return RowOutcome(CONVERTED, clips=len(sidechannel.clips))


class AudioConverter(RowConverter):
    """A direction that runs the gateway's own rewrite pipeline on each row."""

    def __init__(self, config: Config, renaming: KeyRenaming, pipeline: RewritePipeline) -> None:
        super().__init__(config, renaming)
        self.pipeline = pipeline

    async def upstream_body(self, raw: bytes, found: RowRequest) -> bytes | SegmentedPayload:
        """What the gateway sends upstream for this request (`raw` when it forwards it as is)."""
        body = await self.pipeline.rewrite(raw, route_shape(found, self.config, bridge=False))
        assert not isinstance(body, ReferencedBody)  # route_shape's shapes carry every clip
        return body


class Inliner(AudioConverter):
    """Paths -> the body the gateway would send upstream (the splice applied, the sidechannel
    removed); a NeMo Gym row gets that body as its `responses_create_params`."""

    direction = "inline"

    async def convert_row(
        self, line: Line, found: RowRequest, sidechannel: Sidechannel | None, out: IO[bytes]
    ) -> RowOutcome:
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


class Extractor(AudioConverter):
    """Inline audio -> clip files; a row converts only when the gateway would send the same."""

    direction = "extract"

    def __init__(
        self,
        config: Config,
        renaming: KeyRenaming,
        pipeline: RewritePipeline,
        clips: ClipDirectory,
    ) -> None:
        super().__init__(config, renaming, pipeline)
        self.clip_dir = clips

    @property
    def files_written(self) -> tuple[int, int]:
        return self.clip_dir.files_written, self.clip_dir.bytes_written

    async def convert_row(
        self, line: Line, found: RowRequest, sidechannel: Sidechannel | None, out: IO[bytes]
    ) -> RowOutcome:
        raw = found.encoded_request(line.data)
        try:
            inline = find_inline_audio(found, sidechannel)
        except KeepInline:
            self.write_kept(line, found, sidechannel, out)
            return RowOutcome(KEPT_INLINE)
        if inline is None:
            self.write_kept(line, found, sidechannel, out)
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
            self.write_kept(line, found, sidechannel, out)
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
        probe = msgspec.json.encode(with_paths(found, inline, readable, self.renaming.source))
        try:
            body = msgspec.json.decode(await _joined(await self.upstream_body(probe, found)))
        except GatewayError:
            return None  # e.g. more clips than audio.max_clips once they are paths
        if body != expected:
            return None
        paths = [clip.path for clip in staged]
        return found.row_with(with_paths(found, inline, paths, self.renaming.target))


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
