"""`audio-gateway check`: every row held to the server's rules, with its clips' facts.

A row is checked in the order the server works (`pipeline.RewritePipeline.rewrite`): the body,
the sidechannel, the paths (local files resolved, then objects named and HEADed, then each clip
opened or fetched and sniffed), the part formats and the splice; the first error is the row's
error, with the server's code. The file and object checks of many rows run at once on `jobs`
worker threads (objects through `objects.ObjectChecks`) while the main thread parses the next
rows; results are taken in row order, so the first examples of each error are the first in the
file.
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from ..audio.durations import (
    HEADER_BYTES,
    AudioHeader,
    check_decode_limits,
    read_base64_header,
    read_header,
)
from ..audio.encoder import open_checked_file, read_checked
from ..audio.policy import PathPolicy, ResolvedClip
from ..audio.sources.objects import ObjectClip
from ..config import Config
from ..errors import GatewayError
from ..models.placement import Placement
from ..naming.content_parts import PartClip, check_clip_count, part_clips
from ..naming.formats import SNIFF_BYTES, checked_mime, input_audio_format
from ..naming.sidechannel import InlineAudio, PathAudio, SidechannelKeys, base64_decoded_size
from ..normalize.form import TargetForm, WavFormat, format_in_form, wav_format
from ..request.model_rules import ModelSettings
from ..request.shapes import RouteShape
from .jsonl import Line
from .objects import ObjectChecks, ObjectHead
from .results import CheckedRow, ClipFacts, RowError
from .root_hints import with_root_named
from .rows import (
    RowRequest,
    carries_audio,
    parse_row,
    request_too_large,
    route_shape,
    row_error,
    served_request,
)

_T = TypeVar("_T")
ROWS_IN_FLIGHT_PER_JOB = 16  # enough rows queued that no worker waits on the parser
HEAD_MEMO_ENTRIES = 65_536  # files whose first bytes are remembered (seeds repeat a clip)


@dataclass(frozen=True, slots=True)
class _Head:
    """What a file's first bytes say: the sniffing bytes and the duration header."""

    sniff: bytes
    header: AudioHeader | None
    form: WavFormat | None  # what its fmt chunk says, for [normalize]


@dataclass(slots=True)
class _Prepared:
    """A row after the main thread's part: either done, or waiting on its file checks."""

    line: Line
    request: RowRequest | None = None
    done: CheckedRow | None = None
    refs: list[PathAudio] = field(default_factory=list)
    input_audio_fix: str | None = None  # the route's parts name a format: how to avoid that
    inline: list[ClipFacts] = field(default_factory=list)
    later_error: GatewayError | None = None  # part format or splice: after the file checks
    audio: bool = False  # the row names audio (known before its first error, if any)


class _PathFailure(Exception):
    def __init__(self, ref: PathAudio, error: GatewayError) -> None:
        self.ref = ref
        self.error = error


class RowChecker:
    """Checks rows against one config, as `serve` with that config would; `close` it when done
    (it may hold an event loop for object checks)."""

    def __init__(
        self, config: Config, policy: PathPolicy, objects: ObjectChecks | None = None
    ) -> None:
        self.config = config
        self.policy = policy
        self.objects = objects or ObjectChecks(config)
        self.keys = SidechannelKeys(config.sidechannel.key_prefix)
        self.part_roots = config.content_part_roots()
        # Each row's model's clip limit, where the config or its served name places it.
        self.models = ModelSettings(Placement(config), config.normalize)
        self._heads: dict[tuple[str, int, int, int, int, int], _Head] = {}
        # [normalize]'s target form: what `check` counts clips against (None: it is off).
        self.form = TargetForm.of(config.normalize) if config.normalize.enabled else None

    def close(self) -> None:
        self.objects.close()

    def prepare(self, line: Line) -> _Prepared:
        """The CPU part, on the calling thread: body, sidechannel, inline audio, splice."""
        prepared = _Prepared(line)
        try:
            self._prepare(prepared)
        except GatewayError as error:
            found = prepared.request
            has_audio = prepared.audio or (found is not None and self.keys.carries(found.request))
            prepared.done = CheckedRow(line, has_audio, error=self._error(prepared, error))
        return prepared

    def check_paths(self, prepared: _Prepared) -> list[ClipFacts]:
        """Blocking, on a worker thread: resolve every path and HEAD every object, then open or
        fetch and sniff each clip, then name each part's format (the server's order: the first
        failure is the row's)."""
        resolved = self._sources(prepared.refs)
        prefix = prepared.request.prefix if prepared.request is not None else ""
        # As the server: every clip is read and sniffed, then every clip's length is checked.
        heads = self._read_heads(resolved)
        facts = [
            self._failing_as(clip.ref, self._clip_facts, clip, header, prefix, form)
            for clip, (_, header, form) in zip(resolved, heads, strict=True)
        ]
        fix = prepared.input_audio_fix
        file_urls = self.config.splice.mode == "file_url"
        if fix is not None:
            for clip, (mime, _, _), fact in zip(resolved, heads, facts, strict=True):
                if file_urls and not isinstance(clip, ObjectClip):
                    continue  # a file:// URL part names no format (objects still go as bytes)
                if fact.normalized:
                    continue  # it goes as the WAV [normalize] makes of it
                ref = clip.ref
                name = {"label": ref.label, "given": ref.given, "param": ref.param}
                self._failing_as(ref, partial(input_audio_format, mime, **name, fix=fix))
        return facts

    def _sources(self, refs: Sequence[PathAudio]) -> list[ResolvedClip | ObjectClip]:
        """Every reference checked by its kind's policy, as the pipeline's `sources` does:
        local paths first, then the objects (names, HEADs) concurrently."""
        claimed = [self.objects.claims(ref) for ref in refs]
        local = [
            self._failing_as(ref, self.policy.resolve, ref)
            for ref, is_object in zip(refs, claimed, strict=True)
            if not is_object
        ]
        object_refs = [ref for ref, is_object in zip(refs, claimed, strict=True) if is_object]
        remote: list[ObjectClip] = []
        for ref, result in zip(object_refs, self.objects.clips(object_refs), strict=True):
            if isinstance(result, GatewayError):
                raise _PathFailure(ref, result)
            if isinstance(result, BaseException):
                raise result
            remote.append(result)
        locals_, objects = iter(local), iter(remote)
        return [next(objects) if is_object else next(locals_) for is_object in claimed]

    @staticmethod
    def _failing_as(ref: PathAudio, check: Callable[..., _T], *args: Any) -> _T:
        try:
            return check(*args)
        except GatewayError as error:
            raise _PathFailure(ref, error) from None

    def finish(self, prepared: _Prepared, paths: Future[list[ClipFacts]] | None) -> CheckedRow:
        """The row's result once its file checks (if any) are done."""
        if prepared.done is not None:
            return prepared.done
        clips = prepared.inline
        if paths is not None:
            try:
                clips = paths.result()
            except _PathFailure as failure:
                error = self._error(prepared, failure.error, failure.ref.given)
                return CheckedRow(prepared.line, True, error=error)
        if prepared.later_error is not None:
            return CheckedRow(
                prepared.line, True, error=self._error(prepared, prepared.later_error)
            )
        return CheckedRow(prepared.line, True, clips=tuple(clips))

    def _prepare(self, prepared: _Prepared) -> None:
        line = prepared.line
        prepared.request = found = parse_row(line.data)
        if len(line.data) > self.config.server.max_body_bytes:
            size = len(found.encoded_request(line.data.rstrip(b"\r\n")))  # the body, sans EOL
            too_large = request_too_large(size, self.config.server.max_body_bytes)
            if too_large is not None:
                raise too_large
        audio = self.config.audio
        params: dict[tuple[int, int], str] = {}
        if carries_audio(found, self.config, self.keys):
            prepared.audio = True
            request, params = served_request(found, self.config)
            found = dataclasses.replace(found, request=request)
        sidechannel = self.keys.read(found.request, audio.max_clips, audio.max_file_bytes)
        shape = route_shape(found, self.config)
        in_parts = self._part_clips(prepared, found, shape, params)
        if sidechannel is None and not in_parts:
            prepared.done = CheckedRow(line, prepared.audio)
            return
        clips = (*(sidechannel.clips if sidechannel else ()), *(c.ref for c in in_parts))
        side_key = sidechannel.param if sidechannel is not None else None
        check_clip_count([c.param for c in clips], len(in_parts), side_key, audio.max_clips)
        rules = self.models.placement.rules_offline(found.request.get("model"))
        items = found.request.get(shape.items)
        self.models.check_clips(rules, [c.param for c in clips], items, in_parts)
        prepared.input_audio_fix = shape.input_audio_fix if shape.input_audio_parts else None
        for clip in clips:
            if isinstance(clip, PathAudio):
                prepared.refs.append(clip)
            else:
                prepared.inline.append(self._inline_facts(clip, found.prefix))
        if sidechannel is not None:
            prepared.later_error = self._splice_error(found, sidechannel.clips)

    def _part_clips(
        self,
        prepared: _Prepared,
        found: RowRequest,
        shape: RouteShape,
        params: dict[tuple[int, int], str],
    ) -> list[PartClip]:
        """The row's content parts naming paths, as the server reads them."""
        if self.part_roots is None or not shape.content_parts:
            return []
        try:
            clips = part_clips(found.request.get("messages"), self.part_roots, params)
        except GatewayError:
            prepared.audio = True
            raise
        prepared.audio = prepared.audio or bool(clips)
        return clips

    def _inline_facts(self, clip: InlineAudio, prefix: str) -> ClipFacts:
        size = base64_decoded_size(clip.uri, clip.payload_start)
        header = read_base64_header(clip.payload, size)
        self._check_limits(header, clip.param, clip.given, clip.param)
        seconds = None if header is None else header.seconds
        return ClipFacts(prefix + clip.param, None, None, size, seconds)

    def _check_limits(self, header: AudioHeader | None, label: str, given: str, param: str) -> None:
        audio = self.config.audio
        check_decode_limits(
            header,
            audio.max_duration_seconds,
            audio.max_decode_bytes,
            label=label,
            given=given,
            param=param,
        )

    def _splice_error(
        self, found: RowRequest, clips: tuple[InlineAudio | PathAudio, ...]
    ) -> GatewayError | None:
        """What the server's part building and splice would say, with stand-in parts (the
        request is spliced in place: a checked row is not used afterwards)."""
        shape = route_shape(found, self.config)
        try:
            for clip in clips:
                if shape.input_audio_parts and isinstance(clip, InlineAudio):
                    input_audio_format(
                        clip.mime,
                        label=clip.param,
                        given=clip.given,
                        param=clip.param,
                        fix=shape.input_audio_fix,
                    )
            shape.splice(found.request, [{"type": "stand-in"} for _ in clips])
        except GatewayError as error:
            return error
        return None

    def _read_heads(self, clips: Sequence[ResolvedClip | ObjectClip]) -> list[ObjectHead]:
        """Each clip's sniffed MIME type (400 not_audio), header and WAV format; the objects
        read concurrently, the first failure in the row's order raised."""
        objects = [clip for clip in clips if isinstance(clip, ObjectClip)]
        object_heads = iter(self.objects.heads(objects) if objects else ())
        heads = []
        for clip in clips:
            if not isinstance(clip, ObjectClip):
                heads.append(self._failing_as(clip.ref, self._file_head, clip))
                continue
            head = next(object_heads)
            if isinstance(head, GatewayError):
                raise _PathFailure(clip.ref, head)
            if isinstance(head, BaseException):
                raise head
            heads.append(head)
        return heads

    def _clip_facts(
        self,
        clip: ResolvedClip | ObjectClip,
        header: AudioHeader | None,
        prefix: str,
        form: WavFormat | None,
    ) -> ClipFacts:
        ref = clip.ref
        self._check_limits(header, ref.label, ref.given, ref.param)
        real_path = clip.info.name.url if isinstance(clip, ObjectClip) else clip.real_path
        seconds = None if header is None else header.seconds
        normalized = self.form is not None and not format_in_form(form, self.form)
        return ClipFacts(prefix + ref.label, ref.given, real_path, clip.size, seconds, normalized)

    def _file_head(self, clip: ResolvedClip) -> ObjectHead:
        head = self._heads.get(clip.cache_key)
        if head is None:
            head = _read_head(clip)
            if len(self._heads) >= HEAD_MEMO_ENTRIES:
                self._heads.clear()
            self._heads[clip.cache_key] = head
        ref = clip.ref
        mime = checked_mime(
            head.sniff, ref.claimed_mime, label=ref.label, given=ref.given, param=ref.param
        )
        return mime, head.header, head.form

    def _error(self, prepared: _Prepared, error: GatewayError, path: str | None = None) -> RowError:
        located = row_error(prepared.line, prepared.request, error, self.keys, path)
        return with_root_named(located, self.config.audio.root)


def _read_head(clip: ResolvedClip) -> _Head:
    """Open the file as the server does (same identity checks) and read its header bytes."""
    fd = open_checked_file(clip)
    try:
        head = read_checked(clip, fd, HEADER_BYTES, 0)
    finally:
        os.close(fd)
    return _Head(head[:SNIFF_BYTES], read_header(head, clip.size), wav_format(head))


def check_rows(
    lines: Iterable[Line], checker: RowChecker, jobs: int
) -> Generator[CheckedRow, None, None]:
    """Every non-blank line checked, in order; at most `jobs * ROWS_IN_FLIGHT_PER_JOB` rows
    are held at once, so memory stays flat whatever the file size."""
    window: deque[tuple[_Prepared, Future[list[ClipFacts]] | None]] = deque()
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="check") as pool:
        for line in lines:
            if line.blank:
                continue
            prepared = checker.prepare(line)
            future = None
            if prepared.done is None and prepared.refs:
                future = pool.submit(checker.check_paths, prepared)
            window.append((prepared, future))
            if len(window) >= jobs * ROWS_IN_FLIGHT_PER_JOB:
                yield checker.finish(*window.popleft())
        while window:
            yield checker.finish(*window.popleft())
