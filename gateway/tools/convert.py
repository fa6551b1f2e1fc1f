"""`audio-gateway convert`: inline audio -> paths (`--extract-to`), paths -> inline (`--inline`),
the sidechannel under another key prefix (`--to-key-prefix`, alone or with either).

Rows stream one at a time into a temporary file next to OUT, renamed over OUT at the end; the
row converters (`converters.py`) say what each row becomes.
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import closing

from ..config import Config
from ..metrics import GatewayMetrics
from ..naming.sidechannel import SidechannelKeys
from ..request.build import build_pipeline
from ..request.pipeline import RewritePipeline
from .blobs import ClipDirectory
from .converters import Extractor, Inliner, Renamer, RowConverter
from .jsonl import AtomicFile, UsageError, check_output_target, existing_inputs, read_lines
from .prefix import KeyRenaming
from .progress import Progress
from .summary import EXIT_CLEAN, EXIT_ROW_ERRORS, ConvertSummary, print_summary

TOOLS_CACHE_BYTES = 128 * 1024**2  # seeds of a clip sit on nearby rows: a small cache serves them


async def run_convert(args: argparse.Namespace, config: Config) -> int:
    (source,) = existing_inputs([args.input])
    renaming = key_renaming(config, args.to_key_prefix)
    if not (args.extract_to or args.inline or args.to_key_prefix is not None):
        raise UsageError("give --extract-to DIR, --inline or --to-key-prefix P")
    check_output_target(source, args.output, args.force)
    if not (args.extract_to or args.inline):
        summary = await convert_file(source, args.output, Renamer(config, renaming), args.strict)
    else:
        summary = await _convert_audio(args, config, renaming, source)
    summary.to_key_prefix = args.to_key_prefix
    print_summary(summary.to_json() if args.json else summary.render())
    return EXIT_ROW_ERRORS if summary.errors.rows else EXIT_CLEAN


def key_renaming(config: Config, to_key_prefix: str | None) -> KeyRenaming:
    """The config's sidechannel names -> `--to-key-prefix`'s (the same without it)."""
    source = SidechannelKeys(config.sidechannel.key_prefix)
    if to_key_prefix is None:
        return KeyRenaming(source, source)
    try:
        return KeyRenaming(source, SidechannelKeys(to_key_prefix))
    except ValueError as exc:
        raise UsageError(f"--to-key-prefix: {exc}") from None


async def _convert_audio(
    args: argparse.Namespace, config: Config, renaming: KeyRenaming, source: str
) -> ConvertSummary:
    if args.extract_to:
        clip_dir = os.path.abspath(args.extract_to)
        _make_clip_dir(clip_dir)
        config = config.with_overrides(audio={"root": clip_dir, "allowed_roots": []})
    pipeline = await _pipeline(config)
    converter: RowConverter = (
        Extractor(config, renaming, pipeline, ClipDirectory(clip_dir))
        if args.extract_to
        else Inliner(config, renaming, pipeline)
    )
    try:
        return await convert_file(source, args.output, converter, args.strict)
    finally:
        pipeline.resolver.close()


async def convert_file(
    source: str, target: str, converter: RowConverter, strict: bool = False
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


async def _pipeline(config: Config) -> RewritePipeline:
    """The server's pipeline for `config`: its path policy, object sources and splice, with
    a smaller cache. Content parts naming paths are left as they are (a path part is already
    the form that needs no sidechannel): only the sidechannel is converted."""
    cache = config.cache.model_copy(
        update={"max_bytes": min(config.cache.max_bytes, TOOLS_CACHE_BYTES)}
    )
    config = config.with_overrides(sidechannel={"content_parts": "pass"})
    return await build_pipeline(config, GatewayMetrics(), cache)


def _make_clip_dir(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--extract-to {path}: {exc.strerror}") from exc
