"""What `check` adds to the server's messages: the root a relative path was looked for under,
and the flag that sets it. The server's own answers never name its directories to a client;
the dataset's owner, running `check`, is the one who needs them."""

from __future__ import annotations

import dataclasses
import os

from .results import RowError

ROOT_FLAG = "--audio-root"


def with_root_named(error: RowError, root: str) -> RowError:
    """`error` with `root` (the `[audio] root` the row was checked against, "" for none) named
    where it explains the error: a relative path not found, a relative path with no root."""
    relative = error.path is not None and not os.path.isabs(error.path)
    if error.code == "audio_not_found" and relative and root:
        hint = f" (looked for under the audio root {root}; {ROOT_FLAG} DIR sets it)"
        return dataclasses.replace(error, message=error.message + hint)
    if error.code == "audio_root_unset":
        hint = f"; pass {ROOT_FLAG} DIR (or set [audio] root in the --config file)"
        return dataclasses.replace(error, message=error.message + hint)
    return error


def describe_root(root: str) -> str:
    """The summary's line for the root relative paths resolve under."""
    return root or f"none: relative paths are refused ({ROOT_FLAG} DIR sets one)"
