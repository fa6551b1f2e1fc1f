"""Every error the gateway itself produces, and its one JSON shape.

    GatewayError                      500 server_error
    ├── InvalidRequest                400 invalid_request_error
    ├── AuthenticationFailed          401 authentication_error
    ├── AudioOutsideRoots             403 permission_error
    ├── AudioNotFound                 404 not_found_error
    ├── ResponseNotStored             404 not_found_error (a bridged answer, never stored)
    ├── AudioFileChanged              409 conflict_error
    ├── PayloadTooLarge               413 invalid_request_error
    ├── UnsupportedMediaType          415 invalid_request_error
    ├── UpstreamUnavailable           502 upstream_error
    │   └── AudioStorageError         502 upstream_error (the object store failed)
    └── UpstreamTimeout               504 upstream_error
        └── AudioStorageTimeout       504 upstream_error (the object store did not answer)

Each instance carries the OpenAI error fields (`message`, `param`, `code`); the error
middleware in `app.py` is the one place that turns them into HTTP responses. Upstream 4xx/5xx
answers are not errors here: they are relayed as they are.
"""

from __future__ import annotations

from typing import Any, ClassVar


class GatewayError(Exception):
    """Base class: an HTTP status and OpenAI error type per subclass."""

    status: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"
    response_headers: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init__(self, message: str, *, param: str | None = None, code: str = "internal_error"):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def to_json(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequest(GatewayError):
    status = 400
    error_type = "invalid_request_error"


class AuthenticationFailed(GatewayError):
    """A /v1 request without one of `server.api_keys`; the message never repeats what was sent."""

    status = 401
    error_type = "authentication_error"
    response_headers = (("WWW-Authenticate", "Bearer"),)  # RFC 9110: a 401 names its scheme


class AudioOutsideRoots(GatewayError):
    """Raised for any path outside the allowed roots, whether or not it exists."""

    status = 403
    error_type = "permission_error"


class AudioNotFound(GatewayError):
    status = 404
    error_type = "not_found_error"


class ResponseNotStored(GatewayError):
    """A lookup of a Responses id the audio bridge answered: it stores nothing."""

    status = 404
    error_type = "not_found_error"


class AudioFileChanged(GatewayError):
    """The file changed between its checks and its read; retrying reads the new version."""

    status = 409
    error_type = "conflict_error"


class PayloadTooLarge(GatewayError):
    status = 413
    error_type = "invalid_request_error"


class UnsupportedMediaType(GatewayError):
    """A request Content-Encoding the gateway cannot undo where it must read the body."""

    status = 415
    error_type = "invalid_request_error"


class UpstreamUnavailable(GatewayError):
    status = 502
    error_type = "upstream_error"


class UpstreamTimeout(GatewayError):
    status = 504
    error_type = "upstream_error"


class AudioStorageError(UpstreamUnavailable):
    """The object store refused or failed a request (credentials included); the message
    names the object URL and the store's error code, never a credential."""


class AudioStorageTimeout(UpstreamTimeout):
    """The object store did not answer within `storage.s3.timeout_seconds`."""
