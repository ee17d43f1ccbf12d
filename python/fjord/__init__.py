"""Fjord: a native io_uring S3 client for Python, PyTorch checkpointing and fsspec.

    import fjord
    client = fjord.Client("http://127.0.0.1:9000", "access-key", "secret-key")
    client.put("bucket", "key", b"bytes")
    client.get_into("bucket", "key", bytearray(5))

`fjord.torch` has the torch.distributed.checkpoint writer and reader and save/load helpers;
`fjord.fsspec` the fsspec filesystem (protocol "fjord").
"""

from ._client import BucketInfo, Client, ObjectEntry, ObjectInfo
from ._errors import (
    AccessDenied,
    BucketAlreadyExists,
    BucketNotEmpty,
    ConditionalRequestConflict,
    Error,
    InvalidRange,
    NoSuchBucket,
    NoSuchKey,
    NoSuchUpload,
    PreconditionFailed,
    RequestTimeout,
    StorageFull,
    TransportError,
)
from ._memory import crc32c
from ._uri import parse_uri

__all__ = [
    "Client",
    "crc32c",
    "ObjectInfo",
    "ObjectEntry",
    "BucketInfo",
    "parse_uri",
    "Error",
    "NoSuchBucket",
    "NoSuchKey",
    "NoSuchUpload",
    "AccessDenied",
    "PreconditionFailed",
    "ConditionalRequestConflict",
    "InvalidRange",
    "BucketNotEmpty",
    "BucketAlreadyExists",
    "StorageFull",
    "TransportError",
    "RequestTimeout",
]
__version__ = "0.1.0"
