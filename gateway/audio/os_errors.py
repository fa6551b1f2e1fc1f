"""What an OS error met while resolving or reading a local clip tells the client. Pure.

Each errno becomes the gateway error that names its cause, the same for `serve` and `check`:

    ENOENT                  404 audio_not_found           does not exist
    ENOTDIR                 404 audio_not_found           a part of its path is a file
    EACCES, EPERM           403 audio_path_forbidden      cannot be read: permission denied
    ELOOP                   400 not_a_regular_file        its symbolic links loop
    ENAMETOOLONG            400 invalid_audio_reference   too long for the file system
    anything else (EIO...)  403 audio_path_forbidden      cannot be read: <the OS's reason>

None is a 5xx or says "retry": these are lasting facts about the file, not the gateway's
state. Only a file whose identity changed between its checks and its read is a 409, and the
reader decides that by comparing identities, never from an errno.
"""

from __future__ import annotations

import errno

from ..errors import AudioNotFound, AudioOutsideRoots, GatewayError, InvalidRequest
from ..naming.sidechannel import PathAudio

# Where the error was met: the resolver opens no file (O_PATH), so a permission error there
# is always a directory of the path; the reader's is the file itself.
RESOLVING = "resolving"
READING = "reading"


def clip_os_error(ref: PathAudio, exc: OSError, stage: str = READING) -> GatewayError:
    """The gateway error naming why `exc` (met at `stage`) keeps `ref` from being read."""
    code = exc.errno
    name = f"{ref.label}: audio file {ref.given!r}"
    if code == errno.ENOENT:
        return AudioNotFound(f"{name} does not exist", param=ref.param, code="audio_not_found")
    if code == errno.ENOTDIR:
        return AudioNotFound(
            f"{name} does not exist: a part of its path is a file, not a directory",
            param=ref.param,
            code="audio_not_found",
        )
    if code in (errno.EACCES, errno.EPERM):
        where = " on a directory of its path" if stage == RESOLVING else ""
        return AudioOutsideRoots(
            f"{name} cannot be read: permission denied{where} (the gateway's user may not read it)",
            param=ref.param,
            code="audio_path_forbidden",
        )
    if code == errno.ELOOP:
        return InvalidRequest(
            f"{ref.label}: {ref.given!r} is not a regular file: its symbolic links loop",
            param=ref.param,
            code="not_a_regular_file",
        )
    if code == errno.ENAMETOOLONG:
        return InvalidRequest(
            f"{ref.label}: {ref.given!r} is too long for the file system (a name in it or "
            "the whole path is over the limit)",
            param=ref.param,
            code="invalid_audio_reference",
        )
    return AudioOutsideRoots(
        f"{name} cannot be read: {_reason(exc)}", param=ref.param, code="audio_path_forbidden"
    )


def _reason(exc: OSError) -> str:
    if exc.errno is not None and exc.errno in errno.errorcode:
        reason = exc.strerror or errno.errorcode[exc.errno]
        return f"{reason[:1].lower()}{reason[1:]} ({errno.errorcode[exc.errno]})"
    return exc.strerror or str(exc) or type(exc).__name__
