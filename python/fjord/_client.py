"""fjord.Client: the native io_uring S3 client from Python.

Every request runs on the client's own reactor threads (C++), with the GIL released while Python
waits. Bodies move straight between the caller's memory and the socket: `put` sends from any
buffer-protocol object or CPU tensor, `get_into` receives into one. Large objects go as parallel
multipart uploads and parallel ranged GETs. The *_async methods return concurrent.futures.Future
objects, resolved by one completion thread per client (callbacks added with add_done_callback run
there: keep them short).

Threads: a Client may be shared by any number of Python threads. After fork() the child gets a fresh
set of reactor threads on its first call (the parent's do not exist in the child); a Client pickles
as its configuration, so it can be handed to a spawned process.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Iterator
from concurrent.futures import Future
from typing import NamedTuple

from . import _native
from ._errors import AccessDenied, Error, InvalidRange, NoSuchKey, PreconditionFailed, TransportError, from_native
from ._memory import memory_of

MiB = 1 << 20
_MIN_PART = 5 * MiB
_MAX_SINGLE_PUT = 5 << 30
_MAX_PARTS = 10000


class ObjectInfo(NamedTuple):
    size: int
    etag: str


class ObjectEntry(NamedTuple):
    key: str
    size: int
    etag: str
    last_modified: str


class BucketInfo(NamedTuple):
    name: str
    creation_date: str


def _env(*names: str, default: str | None = None) -> str | None:
    for n in names:
        v = os.environ.get(n)
        if v:
            return v
    return default


_live_clients: weakref.WeakSet[Client] = weakref.WeakSet()


class Client:
    """A connection to a Fjord (or any S3) endpoint.

    endpoint, access_key, secret_key and region default to FJORD_ENDPOINT, FJORD_ACCESS_KEY,
    FJORD_SECRET_KEY, FJORD_REGION, then AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY, AWS_REGION / AWS_DEFAULT_REGION; the endpoint finally to
    http://127.0.0.1:9000 (what `make serve` listens on).

    threads: reactor threads (each with up to max_connections keep-alive connections);
    part_size / in_flight: the parts or ranges of one large transfer and how many move at once;
    multipart_threshold: PUTs of at least this many bytes go as multipart uploads;
    request_timeout / io_timeout (seconds): the deadline of one request with its retries, and of one
    socket operation; max_attempts: tries per request (retryable failures only: 5xx, resets, and a
    cluster's 409 ConditionalRequestConflict);
    crc32c: send every PUT and part with a CRC32C trailer that the server verifies;
    ca_cert: for an https:// endpoint, a PEM file of the CAs that verify the server (default
    FJORD_CA_CERT, then AWS_CA_BUNDLE; else the system's CAs).
    """

    def __init__(
        self,
        endpoint: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        *,
        region: str | None = None,
        threads: int | None = None,
        max_connections: int = 16,
        max_attempts: int = 4,
        request_timeout: float = 120.0,
        io_timeout: float = 60.0,
        crc32c: bool = False,
        part_size: int = 16 * MiB,
        in_flight: int = 8,
        multipart_threshold: int = 64 * MiB,
        ca_cert: str | None = None,
    ):
        endpoint = endpoint or _env(
            "FJORD_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", default="http://127.0.0.1:9000"
        )
        access_key = access_key or _env("FJORD_ACCESS_KEY", "AWS_ACCESS_KEY_ID")
        secret_key = secret_key or _env("FJORD_SECRET_KEY", "AWS_SECRET_ACCESS_KEY")
        if not access_key or not secret_key:
            raise ValueError(
                "fjord.Client: no credentials (pass access_key and secret_key, or set "
                "FJORD_ACCESS_KEY and FJORD_SECRET_KEY)"
            )
        if part_size < _MIN_PART:
            raise ValueError(f"fjord.Client: part_size must be at least {_MIN_PART} bytes (S3's minimum part)")
        if in_flight < 1 or max_connections < 1 or max_attempts < 1:
            raise ValueError("fjord.Client: in_flight, max_connections and max_attempts must be positive")
        self._config = dict(
            endpoint=endpoint,
            access_key=access_key,
            secret_key=secret_key,
            region=region or _env("FJORD_REGION", "AWS_REGION", "AWS_DEFAULT_REGION", default="us-east-1"),
            threads=threads or min(4, os.cpu_count() or 1),
            max_connections=max_connections,
            max_attempts=max_attempts,
            request_timeout=request_timeout,
            io_timeout=io_timeout,
            crc32c=crc32c,
            part_size=part_size,
            in_flight=in_flight,
            multipart_threshold=multipart_threshold,
            ca_cert=str(ca_cert or _env("FJORD_CA_CERT", "AWS_CA_BUNDLE", default="")),
        )
        self._setup()
        self._runtime()  # fails now on a bad endpoint or an io_uring the kernel lacks

    def _setup(self) -> None:
        self._lock = threading.Lock()
        self._rt = None
        self._pid = None
        self._pending: dict = {}
        self._completer: threading.Thread | None = None
        self._closed = False
        _live_clients.add(self)

    # -- configuration and lifecycle ---------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return self._config["endpoint"]

    def _runtime(self):
        rt = self._rt
        if rt is not None and self._pid == os.getpid():
            return rt
        with self._lock:
            if self._closed:
                raise ValueError("fjord.Client: the client is closed")
            if self._rt is None or self._pid != os.getpid():
                c = self._config
                self._rt = _native.Runtime(
                    c["endpoint"],
                    c["access_key"],
                    c["secret_key"],
                    c["region"],
                    c["threads"],
                    c["max_connections"],
                    c["max_attempts"],
                    int(c["request_timeout"] * 1000),
                    int(c["io_timeout"] * 1000),
                    c["crc32c"],
                    c["ca_cert"],
                )
                self._pid = os.getpid()
            return self._rt

    def close(self) -> None:
        """Lets the requests in flight finish (their futures resolve), then stops the threads."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            rt, completer = self._rt, self._completer
        if rt is not None and self._pid == os.getpid():
            rt.close()
            if completer is not None and completer is not threading.current_thread():
                completer.join()

    def _after_fork_in_child(self) -> None:
        # The parent's reactor threads do not exist here: leak that runtime, start afresh on demand.
        # The parent's requests do not run here either: their futures fail in the child.
        if self._rt is not None:
            self._rt.forget()
        pending, self._pending = self._pending, {}
        for future, _, _, what in pending.values():
            if not future.done():
                future.set_exception(TransportError(f"{what}: started before fork(); it does not run in the child"))
        self._lock = threading.Lock()
        self._rt = None
        self._pid = None
        self._completer = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __getstate__(self):
        return {"config": self._config}

    def __setstate__(self, state):
        self._config = state["config"]
        self._setup()

    def __repr__(self) -> str:  # the id keeps fsspec's instance cache from mixing two clients up
        return f"fjord.Client({self.endpoint!r}, id=0x{id(self):x})"

    # -- running operations ------------------------------------------------------------------------

    def _wait(self, what: str, op):
        """Waits for a synchronous operation. Its memory is pinned by the runtime (submitted with
        keep=...), so an exception here, even before this call, cannot free memory in use."""
        try:
            while not op.wait(0.25):  # in slices, so that Ctrl-C is seen
                pass
        except BaseException:
            op.wait()  # the caller's memory is in use until the request ends, whatever the caller does
            raise
        finally:
            rt = self._rt
            if op.done() and rt is not None:
                rt.unpin(op.id)
        err = op.error()
        if err is not None:
            raise from_native(err, what)
        return op.result()

    def _submit_async(self, what: str, start, convert) -> Future:
        rt = self._runtime()
        future: Future = Future()
        future.set_running_or_notify_cancel()
        with self._lock:
            op = start(rt)
            self._pending[op.id] = (future, op, convert, what)
            if self._completer is None:
                self._completer = threading.Thread(
                    target=_complete, args=(rt, self._pending, self._lock), daemon=True, name="fjord-completions"
                )
                self._completer.start()
        return future

    def _part_size(self, nbytes: int, part_size: int | None) -> int:
        size = part_size or self._config["part_size"]
        if size < _MIN_PART:
            raise ValueError(f"part_size must be at least {_MIN_PART} bytes")
        return max(size, -(-nbytes // _MAX_PARTS))

    # -- buckets -----------------------------------------------------------------------------------

    def create_bucket(self, bucket: str) -> None:
        """Creates the bucket; succeeds if it already exists and is yours."""
        self._wait(f"create bucket {bucket}", self._runtime().create_bucket(bucket))

    def delete_bucket(self, bucket: str) -> None:
        self._wait(f"delete bucket {bucket}", self._runtime().delete_bucket(bucket))

    def list_buckets(self) -> list[BucketInfo]:
        return [BucketInfo(*b) for b in self._wait("list buckets", self._runtime().list_buckets())]

    # -- objects -----------------------------------------------------------------------------------

    def _start_put(self, rt, bucket, key, memory, if_none_match, part_size, in_flight, asynchronous, crc32c=None):
        n = memory.nbytes
        if crc32c is not None and n > _MAX_SINGLE_PUT:
            raise ValueError(f"put {bucket}/{key}: crc32c= goes with a single PUT, at most {_MAX_SINGLE_PUT} bytes")
        multipart = not if_none_match and crc32c is None and n >= self._config["multipart_threshold"]
        return rt.put(
            bucket,
            key,
            memory.address,
            n,
            multipart,
            self._part_size(n, part_size),
            in_flight or self._config["in_flight"],
            if_none_match or "",
            asynchronous,
            memory,
            crc32c,
        )

    def put(
        self,
        bucket: str,
        key: str,
        data,
        *,
        if_none_match: str | None = None,
        crc32c: int | None = None,
        part_size: int | None = None,
        in_flight: int | None = None,
    ) -> ObjectInfo:
        """Writes `data` (bytes-like, numpy array, CPU tensor: sent in place) as the object. At least
        multipart_threshold bytes go as a parallel multipart upload. if_none_match="*" writes only if
        the key does not exist (PreconditionFailed otherwise; always a single PUT). crc32c: the data's
        CRC32C (fjord.crc32c), which the server checks before it stores anything (BadDigest otherwise)
        and keeps with the object; always a single PUT (up to 5 GiB)."""
        memory = memory_of(data, writable=False)
        op = self._start_put(self._runtime(), bucket, key, memory, if_none_match, part_size, in_flight, False, crc32c)
        return ObjectInfo(*self._wait(f"put {bucket}/{key}", op)[::-1])

    def put_async(
        self,
        bucket: str,
        key: str,
        data,
        *,
        if_none_match: str | None = None,
        crc32c: int | None = None,
        part_size: int | None = None,
        in_flight: int | None = None,
    ) -> Future:
        """put() in the background: a Future of the ObjectInfo. `data` must not change until it resolves."""
        memory = memory_of(data, writable=False)
        return self._submit_async(
            f"put {bucket}/{key}",
            lambda rt: self._start_put(rt, bucket, key, memory, if_none_match, part_size, in_flight, True, crc32c),
            lambda r: ObjectInfo(r[1], r[0]),
        )

    def _start_get(self, rt, bucket, key, memory, offset, exact, range_size, in_flight, asynchronous, if_match=""):
        return rt.get(
            bucket,
            key,
            offset,
            memory.address,
            memory.nbytes,
            range_size or self._config["part_size"],
            in_flight or self._config["in_flight"],
            exact,
            if_match or "",
            asynchronous,
            memory,
        )

    def get_into(
        self,
        bucket: str,
        key: str,
        buffer,
        *,
        offset: int = 0,
        exact: bool = False,
        range_size: int | None = None,
        in_flight: int | None = None,
        if_match: str | None = None,
    ) -> int:
        """Reads the object's bytes from `offset` straight into `buffer` (writable bytes-like, numpy
        array, CPU tensor), in parallel ranges, up to the buffer's size or the object's end. Returns
        the number of bytes read. exact=True: the caller knows the object holds every byte asked for,
        so all ranges start at once (otherwise the first goes alone to learn the size, and the others
        carry its ETag in If-Match, so that the read never mixes two versions of the object).
        if_match: read only that version (an ETag); PreconditionFailed once it was replaced."""
        memory = memory_of(buffer, writable=True)
        if memory.nbytes == 0:
            memory.release()
            return 0
        op = self._start_get(
            self._runtime(), bucket, key, memory, offset, exact, range_size, in_flight, False, if_match
        )
        return self._wait(f"get {bucket}/{key}", op)[0]

    def get_into_async(
        self,
        bucket: str,
        key: str,
        buffer,
        *,
        offset: int = 0,
        exact: bool = False,
        range_size: int | None = None,
        in_flight: int | None = None,
    ) -> Future:
        """get_into() in the background: a Future of the byte count."""
        memory = memory_of(buffer, writable=True)
        if memory.nbytes == 0:
            memory.release()
            done: Future = Future()
            done.set_result(0)
            return done
        return self._submit_async(
            f"get {bucket}/{key}",
            lambda rt: self._start_get(rt, bucket, key, memory, offset, exact, range_size, in_flight, True),
            lambda r: r[0],
        )

    def get(self, bucket: str, key: str, *, offset: int = 0, length: int | None = None) -> bytes:
        """The object's bytes (from `offset`, `length` of them or to the end)."""
        for _ in range(4):
            try:
                head = self.head(bucket, key)
            except (NoSuchKey, AccessDenied):
                # A HEAD answer has no body: a GET's error document says what is wrong (a missing bucket
                # or key, which signature check failed).
                self._explain(bucket, key)
                continue
            if offset > head.size or (offset == head.size and head.size > 0):
                raise InvalidRange(f"get {bucket}/{key}: offset {offset} is past the end ({head.size} bytes)")
            want = head.size - offset if length is None else min(length, head.size - offset)
            if want <= 0:
                return b""
            out = bytearray(want)
            op = self._start_get(
                self._runtime(), bucket, key, memory_of(out, writable=True), offset, True, None, None, False, head.etag
            )
            try:
                got = self._wait(f"get {bucket}/{key}", op)[0]
            except PreconditionFailed:
                continue  # replaced since the HEAD: read the new version
            return bytes(out) if got == want else bytes(out[:got])
        raise Error(f"get {bucket}/{key}: the object kept changing while it was read")

    def _explain(self, bucket: str, key: str) -> None:
        # A one-byte GET, for the error document that names the problem.
        probe = bytearray(1)
        memory = memory_of(probe, writable=True)
        try:
            self._wait(
                f"get {bucket}/{key}",
                self._runtime().get(bucket, key, 0, memory.address, 1, 1 << 20, 1, True, "", False, memory),
            )
        except InvalidRange:
            pass  # an empty object appeared meanwhile: the caller looks again

    def head(self, bucket: str, key: str) -> ObjectInfo:
        """Size and ETag; NoSuchKey if there is no such object."""
        r = self._wait(f"head {bucket}/{key}", self._runtime().head(bucket, key))
        if r is None:
            e = NoSuchKey(f"head {bucket}/{key}: no such key")
            e.code, e.status, e.kind = "NoSuchKey", 404, "no_such_key"
            raise e
        return ObjectInfo(*r)

    def head_async(self, bucket: str, key: str) -> Future:
        """A Future of the ObjectInfo, or of None when the key does not exist."""
        return self._submit_async(
            f"head {bucket}/{key}",
            lambda rt: rt.head(bucket, key, True),
            lambda r: None if r is None else ObjectInfo(*r),
        )

    def exists(self, bucket: str, key: str) -> bool:
        return self._wait(f"head {bucket}/{key}", self._runtime().head(bucket, key)) is not None

    def delete(self, bucket: str, key: str) -> None:
        """Deletes the object (succeeds if it did not exist, as S3 does)."""
        self._wait(f"delete {bucket}/{key}", self._runtime().delete(bucket, key))

    def delete_async(self, bucket: str, key: str) -> Future:
        return self._submit_async(f"delete {bucket}/{key}", lambda rt: rt.delete(bucket, key, True), lambda r: None)

    def delete_many(self, bucket: str, keys) -> list[tuple[str, str, str]]:
        """Deletes the keys with DeleteObjects (1,000 a request); returns (key, code, message) for
        each key that could not be deleted."""
        keys = list(keys)
        failures: list = []
        for i in range(0, len(keys), 1000):
            chunk = keys[i : i + 1000]
            failures += self._wait(
                f"delete {len(chunk)} keys in {bucket}", self._runtime().delete_objects(bucket, chunk)
            )
        return failures

    def list(self, bucket: str, prefix: str = "") -> Iterator[ObjectEntry]:
        """Every object under `prefix`, in key order, following the pages."""
        token = ""
        while True:
            objects, _, truncated, token = self._wait(
                f"list {bucket}/{prefix}", self._runtime().list(bucket, prefix, "", token, 1000)
            )
            for o in objects:
                yield ObjectEntry(*o)
            if not truncated:
                return

    def list_page(
        self, bucket: str, prefix: str = "", *, delimiter: str = "", token: str = "", max_keys: int = 1000
    ) -> tuple[list[ObjectEntry], list[str], str]:
        """One ListObjectsV2 page: (objects, common prefixes, the next page's token or "" at the end)."""
        objects, prefixes, truncated, token = self._wait(
            f"list {bucket}/{prefix}", self._runtime().list(bucket, prefix, delimiter, token, max_keys)
        )
        return [ObjectEntry(*o) for o in objects], list(prefixes), token if truncated else ""

    def list_dir(self, bucket: str, prefix: str = "", delimiter: str = "/") -> tuple[list[ObjectEntry], list[str]]:
        """One level under `prefix`: the objects and the common prefixes ("sub-directories")."""
        entries: list = []
        prefixes: list = []
        token = ""
        while True:
            objects, common, truncated, token = self._wait(
                f"list {bucket}/{prefix}", self._runtime().list(bucket, prefix, delimiter, token, 1000)
            )
            entries += [ObjectEntry(*o) for o in objects]
            prefixes += common
            if not truncated:
                return entries, prefixes


def _complete(rt, pending: dict, lock: threading.Lock) -> None:
    """The completion thread: resolves the futures of finished asynchronous operations. It holds no
    reference to the Client, so a forgotten Client is still collected (and closes)."""
    while True:
        ids = rt.wait_completed(0.5)
        for op_id in ids:
            with lock:
                entry = pending.pop(op_id, None)
            if entry is None:
                continue
            future, op, convert, what = entry
            err = op.error()
            rt.unpin(op_id)
            try:
                if err is not None:
                    future.set_exception(from_native(err, what))
                else:
                    future.set_result(convert(op.result()))
            except Exception as e:  # a failing converter must not stop the thread
                future.set_exception(e)
        if not ids and rt.drained:  # closed, and every operation finished: nothing more will come
            with lock:
                leftovers = list(pending.values())
                pending.clear()
            for future, _, _, what in leftovers:
                if not future.done():
                    future.set_exception(TransportError(f"{what}: the client closed before it finished"))
            return


_default_clients: dict = {}
_default_lock = threading.Lock()


def default_client() -> Client:
    """One Client per process from the environment (FJORD_* / AWS_*), made on first use: what
    fjord.torch and fjord.fsspec use when no client is given."""
    pid = os.getpid()
    with _default_lock:
        c = _default_clients.get(pid)
        if c is None or c._closed:
            c = _default_clients[pid] = Client()
        return c


def _after_fork_in_child() -> None:
    global _default_lock
    _default_lock = threading.Lock()
    for c in list(_live_clients):
        c._after_fork_in_child()


def _close_all_at_exit() -> None:
    for c in list(_live_clients):
        try:
            c.close()
        except Exception:
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all_at_exit)
