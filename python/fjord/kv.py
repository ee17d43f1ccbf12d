"""fjord.kv: the KV-cache tier from Python.

A KV bucket (`Store.create`, `fjord mb --kv`) holds immutable blocks (KV-cache chunks, typically 64 KiB to
32 MiB) in a DRAM tier in front of a log-structured NVMe store on the server. A Store talks to one such
bucket through the batch API: many blocks per request, streamed from and into the caller's memory
(bytes-like objects, numpy arrays, CPU tensors) without copies, each block checked with its CRC32C at
both ends. The same blocks are plain S3 objects too (HEAD, GET with Range, PUT, DELETE).

    store = fjord.kv.Store("kv-cache", create=True)
    store.batch_put_from(["h1", "h2"], [tensor1, tensor2])
    hits = store.prefix_lookup(["h1", "h2", "h3"])      # 2: the leading run of hits
    store.batch_get_into(["h1", "h2"], [out1, out2])     # [nbytes, nbytes]; None for a miss
"""

from __future__ import annotations

from collections.abc import Sequence

from ._client import Client
from ._errors import Error
from ._memory import memory_of

MiB = 1 << 20

# Per-block outcomes of the native client (client/kv_client.h, kv_status).
_OK, _ABSENT, _FAILED, _TOO_SMALL, _CORRUPT = range(5)


class BlockTooLarge(ValueError):
    """A block is larger than the buffer given for it."""


class Store:
    """One KV bucket. Thread-safe (calls run on the client's reactor threads, GIL released).

    client: a fjord.Client (or one is made from endpoint/access_key/secret_key, or the environment as
    for fjord.Client). request_bytes: the values one batch request carries before it is split (the
    parts go on `in_flight` connections at once)."""

    def __init__(
        self,
        bucket: str,
        client: Client | None = None,
        *,
        endpoint: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        create: bool = False,
        capacity_bytes: int = 0,
        ttl_seconds: int = 0,
        ack: str = "nvme",
        request_bytes: int = 16 * MiB,
        in_flight: int = 4,
    ):
        self.bucket = bucket
        self._owns_client = client is None
        self.client = client or Client(endpoint, access_key, secret_key)
        self.request_bytes = int(request_bytes)
        self.in_flight = int(in_flight)
        self._registered: dict[int, object] = {}
        if create:
            self.create(
                self.client, bucket, capacity_bytes=capacity_bytes, ttl_seconds=ttl_seconds, ack=ack, exist_ok=True
            )

    @staticmethod
    def create(
        client: Client,
        bucket: str,
        *,
        capacity_bytes: int = 0,
        ttl_seconds: int = 0,
        ack: str = "nvme",
        exist_ok: bool = False,
    ) -> None:
        """Makes a KV bucket: capacity_bytes of NVMe (0: the server's default), blocks older than
        ttl_seconds read as absent (0: never), writes acknowledged once on NVMe (ack="nvme") or once in
        the server's DRAM (ack="dram": faster; a server crash may lose the newest blocks)."""
        if ack not in ("nvme", "dram"):
            raise ValueError("ack is 'nvme' or 'dram'")
        op = client._runtime().create_kv_bucket(bucket, int(capacity_bytes), int(ttl_seconds), ack == "dram")
        try:
            client._wait(f"create KV bucket {bucket}", op)
        except Error as e:
            if not (exist_ok and e.code == "BucketAlreadyOwnedByYou"):
                raise

    def close(self) -> None:
        self._registered.clear()
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- batches -----------------------------------------------------------------------------------

    def _run(self, what: str, op):
        return self.client._wait(f"{what} in KV bucket {self.bucket}", op)

    def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        sizes, _ = self._run("batch exists", self.client._runtime().kv_exists(self.bucket, list(keys)))
        return [s is not None for s in sizes]

    def batch_sizes(self, keys: Sequence[str]) -> list[int | None]:
        sizes, _ = self._run("batch exists", self.client._runtime().kv_exists(self.bucket, list(keys)))
        return sizes

    def prefix_lookup(self, keys: Sequence[str]) -> int:
        """How many of keys, from the first on, are present (one round trip): the reusable prefix."""
        if not keys:
            return 0
        _, leading = self._run("prefix lookup", self.client._runtime().kv_exists(self.bucket, list(keys)))
        return leading

    def _addresses(self, buffers, writable: bool):
        memories = [memory_of(b, writable=writable) for b in buffers]
        return memories, [m.address for m in memories], [m.nbytes for m in memories]

    def batch_put_from(self, keys: Sequence[str], buffers: Sequence) -> list[bool]:
        """Stores buffers[i] under keys[i], sent in place. True: stored; False: the key existed (blocks
        are content-addressed, so the stored one is kept). Raises on a block the server refused."""
        keys = list(keys)
        if len(keys) != len(buffers):
            raise ValueError("one buffer per key")
        memories, addresses, lengths = self._addresses(buffers, writable=False)
        try:
            out = self._put_addresses(keys, addresses, lengths, memories)
        finally:
            for m in memories:
                m.release()
        return out

    def _put_addresses(self, keys, addresses, lengths, keep=None) -> list[bool]:
        op = self.client._runtime().kv_put(
            self.bucket, keys, addresses, lengths, self.request_bytes, self.in_flight, False, keep
        )
        results = self._run("batch put", op)
        stored = []
        for key, (status, _, code) in zip(keys, results, strict=True):
            if status == _FAILED:
                raise Error(f"batch put in KV bucket {self.bucket}: {key} was refused (error {code})")
            stored.append(status == _OK)
        return stored

    def batch_get_into(self, keys: Sequence[str], buffers: Sequence) -> list[int | None]:
        """Reads keys[i] straight into buffers[i]. Returns each block's size, or None for a miss (absent,
        evicted, expired, or dropped by the server as corrupt; bytes that fail their CRC32C on the way
        count as a miss too). A block larger than its buffer raises BlockTooLarge."""
        keys = list(keys)
        if len(keys) != len(buffers):
            raise ValueError("one buffer per key")
        memories, addresses, lengths = self._addresses(buffers, writable=True)
        try:
            return self._get_addresses(keys, addresses, lengths, memories)
        finally:
            for m in memories:
                m.release()

    def _get_addresses(self, keys, addresses, lengths, keep=None) -> list[int | None]:
        op = self.client._runtime().kv_get(
            self.bucket, keys, addresses, lengths, self.request_bytes, self.in_flight, False, keep
        )
        out: list[int | None] = []
        for key, length, (status, size, _) in zip(keys, lengths, self._run("batch get", op), strict=True):
            if status == _TOO_SMALL:
                raise BlockTooLarge(f"{key}: a block of {size} bytes does not fit a buffer of {length}")
            out.append(size if status == _OK else None)
        return out

    # -- one block ---------------------------------------------------------------------------------

    def put(self, key: str, data) -> bool:
        return self.batch_put_from([key], [data])[0]

    def exists(self, key: str) -> bool:
        return self.batch_exists([key])[0]

    def get_into(self, key: str, buffer) -> int | None:
        return self.batch_get_into([key], [buffer])[0]

    def get(self, key: str) -> bytes | None:
        """The block's bytes, or None (two round trips: its size, then its bytes)."""
        size = self.batch_sizes([key])[0]
        if size is None:
            return None
        buf = bytearray(size)
        got = self.get_into(key, buf)
        return None if got is None else bytes(buf[:got])

    def delete(self, key: str) -> None:
        self.client.delete(self.bucket, key)

    # -- registered memory -------------------------------------------------------------------------

    def register_buffer(self, buffer) -> int:
        """Keeps `buffer` pinned for the Store's lifetime, so that raw addresses inside it may be
        passed to the *_addresses calls (the Mooncake facade's put_from/get_into). Returns its address."""
        memory = memory_of(buffer, writable=True)
        self._registered[memory.address] = memory
        return memory.address

    def unregister_buffer(self, address: int) -> None:
        memory = self._registered.pop(address, None)
        if memory is not None:
            memory.release()
