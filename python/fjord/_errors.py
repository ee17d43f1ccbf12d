"""Exceptions of the fjord package. Every failure of a request is an `Error` carrying the S3 error code,
the HTTP status (0 when no response arrived) and the server's request id; the common ones have their
own classes, which also derive from the matching built-in exception (FileNotFoundError for a missing
bucket or key, PermissionError for refused credentials, ...), so code written against files and fsspec
handles them unchanged."""

from __future__ import annotations


class Error(Exception):
    """A failed request. Attributes: code (S3 error code, e.g. "NoSuchKey"), status (HTTP status, 0 when no
    response arrived), request_id (the server's x-amz-request-id, "" if none), kind (Fjord's error
    name, e.g. "no_such_key", "timed_out")."""

    code: str = ""
    status: int = 0
    request_id: str = ""
    kind: str = ""

    def __str__(self) -> str:
        text = super().__str__()
        return text


class NoSuchBucket(Error, FileNotFoundError):
    pass


class NoSuchKey(Error, FileNotFoundError):
    pass


class NoSuchUpload(Error, FileNotFoundError):
    pass


class AccessDenied(Error, PermissionError):
    """Refused credentials or permissions (AccessDenied, SignatureDoesNotMatch, InvalidAccessKeyId,
    RequestTimeTooSkewed)."""


class PreconditionFailed(Error):
    """A conditional request's condition did not hold (for a PUT with if_none_match="*": the key exists)."""


class ConditionalRequestConflict(Error):
    """A conditional write (if_match, if_none_match) crossed another write of the key and did not happen
    (a cluster's 409, after the retries): read the key again and decide anew."""


class InvalidRange(Error, ValueError):
    pass


class BucketNotEmpty(Error, OSError):
    pass


class BucketAlreadyExists(Error, FileExistsError):
    pass


class StorageFull(Error, OSError):
    """The server has no room for the write (507)."""


class TransportError(Error, ConnectionError):
    """No usable response: connection refused, reset or closed, after the retries."""


class RequestTimeout(Error, TimeoutError):
    """A request's deadline passed (all attempts together), or the server timed the request out."""


_BY_CODE = {
    "NoSuchBucket": NoSuchBucket,
    "NoSuchKey": NoSuchKey,
    "NoSuchUpload": NoSuchUpload,
    "AccessDenied": AccessDenied,
    "SignatureDoesNotMatch": AccessDenied,
    "InvalidAccessKeyId": AccessDenied,
    "RequestTimeTooSkewed": AccessDenied,
    "PreconditionFailed": PreconditionFailed,
    "ConditionalRequestConflict": ConditionalRequestConflict,
    "InvalidRange": InvalidRange,
    "BucketNotEmpty": BucketNotEmpty,
    "BucketAlreadyExists": BucketAlreadyExists,
    "InsufficientStorage": StorageFull,
}
_BY_KIND = {
    "timed_out": RequestTimeout,
    "closed": TransportError,
    "cancelled": TransportError,
}


def from_native(error: tuple, what: str) -> Error:
    """The exception for a native error tuple (kind, message, status, code, request_id)."""
    kind, message, status, code, request_id = error
    cls = _BY_CODE.get(code) if status else None
    if cls is None:
        cls = _BY_KIND.get(kind)
    if cls is None and status == 404:
        cls = NoSuchKey
    if cls is None and status == 0 and kind in ("io_error", "internal"):
        cls = TransportError
    if cls is None:
        cls = Error
    text = f"{what}: {message}" if message else f"{what}: {code or kind}"
    exc = cls(text)
    exc.code = code
    exc.status = status
    exc.request_id = request_id
    exc.kind = kind
    return exc
