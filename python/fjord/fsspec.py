"""An fsspec filesystem on the native client: protocol "fjord" (registered through the package's
entry point), and "s3" too after `fjord.fsspec.register_s3()`.

    import fsspec
    with fsspec.open("fjord://bucket/data.bin", "rb") as f: f.read()

Options (fsspec storage_options; s3fs's names are accepted, so code written for s3fs works unchanged):
endpoint_url (or client_kwargs={"endpoint_url": ...}), key, secret, client (a fjord.Client), and any
fjord.Client keyword (threads, part_size, in_flight, ...).

Paths are "bucket/key". Directories are key prefixes ending in "/" (as in S3): mkdir of a bucket
creates it, of anything deeper does nothing. Files opened for reading fetch ranges on demand
(read-ahead blocks of block_size), all of the version that was opened. Files opened for writing are
buffered in memory and uploaded on close (a parallel multipart upload when large): a process that dies
while writing leaves no object, and so does an exception inside `with fs.open(...)`; fsspec.open's
OpenFile closes (and so uploads) whatever was written, as it does for s3fs.
"""

from __future__ import annotations

import io

from fsspec import AbstractFileSystem, register_implementation
from fsspec.spec import AbstractBufferedFile

from . import _errors
from ._client import Client

_DEFAULT_BLOCK = 8 << 20


class FjordFileSystem(AbstractFileSystem):
    protocol = ("fjord",)
    root_marker = ""

    def __init__(
        self,
        *,
        client: Client | None = None,
        endpoint_url: str | None = None,
        key: str | None = None,
        secret: str | None = None,
        client_kwargs: dict | None = None,
        anon: bool = False,
        default_block_size: int = _DEFAULT_BLOCK,
        **kwargs,
    ):
        options = {k: v for k, v in kwargs.items() if k in _CLIENT_OPTIONS}
        super().__init__(**{k: v for k, v in kwargs.items() if k not in _CLIENT_OPTIONS})
        if anon:
            raise ValueError("fjord fsspec: anonymous access is not supported (the client always signs)")
        endpoint_url = endpoint_url or (client_kwargs or {}).get("endpoint_url")
        self.client = client if client is not None else Client(endpoint_url, key, secret, **options)
        self.default_block_size = default_block_size

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        for scheme in ("fjord://", "s3://", "s3a://"):
            if path.startswith(scheme):
                path = path[len(scheme) :]
                break
        return path.rstrip("/")

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    # -- metadata ----------------------------------------------------------------------------------

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        if not path:
            entries = [{"name": b.name, "size": 0, "type": "directory"} for b in self.client.list_buckets()]
            return entries if detail else [e["name"] for e in entries]
        bucket, key = self._split(path)
        prefix = f"{key}/" if key else ""
        objects, prefixes = self.client.list_dir(bucket, prefix, "/")
        entries = [{"name": f"{bucket}/{p.rstrip('/')}", "size": 0, "type": "directory"} for p in prefixes]
        entries += [self._file_entry(bucket, o) for o in objects if o.key != prefix]
        if not entries and key:
            info = self.info(path)  # a file lists as itself; FileNotFoundError if nothing is there
            entries = [info]
        return entries if detail else [e["name"] for e in entries]

    @staticmethod
    def _file_entry(bucket, o):
        return {
            "name": f"{bucket}/{o.key}",
            "size": o.size,
            "type": "file",
            "ETag": o.etag,
            "LastModified": o.last_modified,
        }

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        bucket, key = self._split(path)
        if not key:
            if not bucket:
                return {"name": "", "size": 0, "type": "directory"}
            try:
                self.client.list_page(bucket, max_keys=1)
            except _errors.NoSuchBucket:
                raise FileNotFoundError(path) from None
            return {"name": bucket, "size": 0, "type": "directory"}
        try:
            head = self.client.head(bucket, key)
            return {"name": path, "size": head.size, "type": "file", "ETag": head.etag}
        except _errors.NoSuchKey:
            pass
        objects, prefixes, _ = self.client.list_page(bucket, f"{key}/", delimiter="/", max_keys=1)
        if objects or prefixes:
            return {"name": path, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    def exists(self, path, **kwargs):
        try:
            self.info(path)
            return True
        except FileNotFoundError:
            return False

    def mkdir(self, path, create_parents=True, **kwargs):
        """Creates the bucket when `path` is one (or, with create_parents, when it is missing); a
        deeper "directory" needs nothing: it exists once an object is under it."""
        path = self._strip_protocol(path)
        bucket, key = self._split(path)
        if not key or (create_parents and not self.exists(bucket)):
            self.client.create_bucket(bucket)

    def makedirs(self, path, exist_ok=False):
        self.mkdir(path, create_parents=True)

    def rmdir(self, path):
        path = self._strip_protocol(path)
        bucket, key = self._split(path)
        if not key:
            self.client.delete_bucket(bucket)

    # -- data --------------------------------------------------------------------------------------

    def cat_file(self, path, start=None, end=None, **kwargs):
        path = self._strip_protocol(path)
        bucket, key = self._split(path)
        if start is None and end is None:
            return self.client.get(bucket, key)
        size = None
        if (start is not None and start < 0) or (end is not None and end < 0):
            size = self.client.head(bucket, key).size
        start = 0 if start is None else (max(0, size + start) if start < 0 else start)
        if end is None:
            if size is None:
                size = self.client.head(bucket, key).size
            return b"" if start >= size else self.client.get(bucket, key, offset=start)
        end = max(0, size + end) if end < 0 else end
        if end <= start:
            return b""
        out = bytearray(end - start)
        got = self.client.get_into(bucket, key, out, offset=start)
        return bytes(out[:got])

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        """mode="create" writes only if nothing is there (FileExistsError otherwise)."""
        bucket, key = self._split(self._strip_protocol(path))
        try:
            self.client.put(bucket, key, value, if_none_match="*" if mode == "create" else None)
        except _errors.PreconditionFailed:
            raise FileExistsError(path) from None

    def rm_file(self, path):
        bucket, key = self._split(self._strip_protocol(path))
        self.client.delete(bucket, key)

    def rm(self, path, recursive=False, maxdepth=None):
        paths = path if isinstance(path, list) else [path]
        for p in paths:
            p = self._strip_protocol(p)
            bucket, key = self._split(p)
            if recursive:
                prefix = f"{key}/" if key else ""
                keys = [o.key for o in self.client.list(bucket, prefix)]
                if key and self.client.exists(bucket, key):
                    keys.append(key)
                failures = self.client.delete_many(bucket, keys)
                if failures:
                    raise OSError(f"fjord: could not delete {len(failures)} keys, e.g. {failures[0]}")
                if not key:
                    self.client.delete_bucket(bucket)
            else:
                self.rm_file(p)
        self.invalidate_cache()

    def cp_file(self, path1, path2, **kwargs):
        self.pipe_file(path2, self.cat_file(path1))

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        path = self._strip_protocol(path)
        if "r" in mode:
            return FjordReadFile(
                self,
                path,
                mode,
                block_size=block_size or self.default_block_size,
                cache_options=cache_options,
                **kwargs,
            )
        if "a" in mode:
            raise NotImplementedError("fjord fsspec: objects cannot be appended to")
        return FjordWriteFile(self, path)


_CLIENT_OPTIONS = {
    "threads",
    "max_connections",
    "max_attempts",
    "request_timeout",
    "io_timeout",
    "crc32c",
    "part_size",
    "in_flight",
    "multipart_threshold",
    "region",
}


class FjordReadFile(AbstractBufferedFile):
    def __init__(self, fs, path, mode, block_size, cache_options=None, **kwargs):
        kwargs.setdefault("cache_type", "readahead")
        super().__init__(fs, path, mode, block_size=block_size, cache_options=cache_options, **kwargs)

    def _fetch_range(self, start, end):
        # Every range of one open file reads the version it opened (If-Match on its ETag): a file
        # replaced meanwhile fails the read (PreconditionFailed) instead of mixing two versions.
        bucket, key = self.fs._split(self.path)
        if end <= start:
            return b""
        out = bytearray(end - start)
        got = self.fs.client.get_into(bucket, key, out, offset=start, if_match=self.details.get("ETag"))
        return bytes(out) if got == len(out) else bytes(out[:got])


class FjordWriteFile(io.RawIOBase):
    """A file written into memory and uploaded on close(); nothing is uploaded if it is discarded
    (closed after an exception inside a `with` block, or garbage-collected unclosed)."""

    def __init__(self, fs: FjordFileSystem, path: str):
        super().__init__()
        self.fs, self.path = fs, path
        self._buffer = bytearray()
        self._discarded = False

    def writable(self):
        return True

    def write(self, data):
        if self.closed:
            raise ValueError("write to a closed file")
        view = memoryview(data).cast("B")
        self._buffer += view
        return len(view)

    def tell(self):
        return len(self._buffer)

    def discard(self):
        self._discarded = True
        super().close()

    def __exit__(self, exc_type, *rest):
        if exc_type is not None:
            self.discard()
        else:
            self.close()

    def close(self):
        if self.closed:
            return
        if not self._discarded:
            bucket, key = self.fs._split(self.path)
            self.fs.client.put(bucket, key, self._buffer)
            self.fs.invalidate_cache()
        self._buffer = bytearray()
        super().close()

    def __del__(self):
        if not self.closed:
            self._discarded = True  # never upload a half-written file from the garbage collector
        super().__del__()


def register_s3(clobber: bool = True) -> None:
    """Makes "s3://" URLs in fsspec use Fjord's native client instead of s3fs."""
    register_implementation("s3", FjordFileSystem, clobber=clobber)
    register_implementation("s3a", FjordFileSystem, clobber=clobber)


register_implementation("fjord", FjordFileSystem, clobber=True)
