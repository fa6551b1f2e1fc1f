"""Log output: `text` (one human-readable line) or `json` (one JSON object per line).

A JSON line always has `time` (UTC, ISO 8601 with milliseconds), `level`, `logger` and
`message`; a request's log line (access log, refusal) adds those of `REQUEST_FIELDS` it has;
an exception adds `exception` (its traceback); a worker of a gateway with `[server] workers`
> 1 adds `worker` (its number, 1 to N; a text line says `[worker N]`). Nothing else of a record
is copied: a field has to be named here to reach the output, so a stray `extra=` cannot leak a
value into the logs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Literal

LogFormat = Literal["text", "json"]
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The fields an access log record carries (`logger.info(..., extra={...})`), in output order.
REQUEST_FIELDS = (
    "method", "route", "path", "status", "code", "param", "duration_ms", "remote", "request_id",
)  # fmt: skip


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines inside values are escaped)."""

    def __init__(self, worker: int | None = None) -> None:
        super().__init__()
        self._worker = worker

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in REQUEST_FIELDS:
            if name in record.__dict__:
                line[name] = record.__dict__[name]
        if self._worker is not None:
            line["worker"] = self._worker
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(level: str, log_format: LogFormat, worker: int | None = None) -> None:
    """The root logger writes to stderr at `level` in `log_format` (replacing any handler);
    `worker`: the number of the worker process whose lines these are."""
    handler = logging.StreamHandler(sys.stderr)
    text = TEXT_FORMAT if worker is None else TEXT_FORMAT.replace(":", f"[worker {worker}]:", 1)
    formatter = JsonFormatter(worker) if log_format == "json" else logging.Formatter(text)
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def add_log_level_option(parser: argparse.ArgumentParser, default: str) -> None:
    """`--log-level` with its choices and default in `--help`; any other value is argparse's
    clean exit 2 naming the flag (the value is taken in any case)."""
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=default,
        metavar="LEVEL",
        help=f"log threshold: {', '.join(LOG_LEVELS)}, in any case (default: %(default)s)",
    )
