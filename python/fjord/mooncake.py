"""A Mooncake-store-compatible facade over a Fjord KV bucket.

`MooncakeStore` has the method names and return conventions of Mooncake's MooncakeDistributedStore
(mooncake.store), so code written against it can keep its calls: 0 for success and a negative code for
failure, get() -> b"" when missing, get_into() -> bytes read or negative, is_exist() -> 1 / 0 / -1, and
the batch_* forms returning one such value per key. Raw-pointer calls (put_from, get_into and their
batches) take addresses the caller keeps valid until the call returns, as Mooncake's do;
register_buffer is accepted (Fjord needs no registration) and checked for sanity only.

setup() takes Mooncake's arguments and ignores the transfer-engine ones (hostnames, RDMA devices,
segment sizes); the Fjord endpoint comes from master_server_addr when it is an http:// URL, else from
FJORD_ENDPOINT / AWS_ENDPOINT_URL, and the bucket from FJORD_KV_BUCKET (default "mooncake").
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ._client import Client
from ._errors import Error, NoSuchKey
from .kv import Store

# Mooncake's error codes for the cases a caller tells apart.
INTERNAL_ERROR = -1
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704


class MooncakeStore:
    def __init__(self) -> None:
        self._store: Store | None = None

    def setup(
        self,
        local_hostname=None,
        metadata_server=None,
        global_segment_size=0,
        local_buffer_size=0,
        protocol="tcp",
        rdma_devices="",
        master_server_addr="",
        *args,
        bucket: str | None = None,
        endpoint: str | None = None,
        **kwargs,
    ) -> int:
        if isinstance(local_hostname, dict):  # setup(config: dict)
            config = local_hostname
            master_server_addr = config.get("master_server_address", config.get("master_server_addr", ""))
            bucket = config.get("bucket", bucket)
            endpoint = config.get("endpoint", endpoint)
        if endpoint is None and str(master_server_addr).startswith("http"):
            endpoint = master_server_addr
        try:
            client = Client(endpoint) if endpoint else Client()
            self._store = Store(bucket or os.environ.get("FJORD_KV_BUCKET", "mooncake"), client, create=True)
        except (Error, ValueError):
            return INTERNAL_ERROR
        return 0

    def _s(self) -> Store:
        if self._store is None:
            raise RuntimeError("MooncakeStore.setup() was not called")
        return self._store

    def close(self) -> int:
        if self._store is not None:
            self._store.client.close()
            self._store = None
        return 0

    # -- whole values ------------------------------------------------------------------------------

    def put(self, key: str, value, config=None) -> int:
        try:
            self._s().put(key, value)
            return 0
        except Error:
            return INTERNAL_ERROR

    def put_batch(self, keys: Sequence[str], values: Sequence, config=None) -> int:
        try:
            self._s().batch_put_from(keys, values)
            return 0
        except Error:
            return INTERNAL_ERROR

    def get(self, key: str) -> bytes:
        try:
            return self._s().get(key) or b""
        except Error:
            return b""

    def get_batch(self, keys: Sequence[str]) -> list[bytes]:
        return [self.get(k) for k in keys]

    def get_size(self, key: str) -> int:
        try:
            size = self._s().batch_sizes([key])[0]
        except Error:
            return INTERNAL_ERROR
        return OBJECT_NOT_FOUND if size is None else size

    # -- raw pointers ------------------------------------------------------------------------------

    def put_from(self, key: str, buffer_ptr: int, size: int, config=None) -> int:
        return self.batch_put_from([key], [buffer_ptr], [size])[0]

    def batch_put_from(
        self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int], config=None
    ) -> list[int]:
        if not (len(keys) == len(buffer_ptrs) == len(sizes)):
            return [INVALID_PARAMS] * len(keys)
        try:
            self._s()._put_addresses(list(keys), [int(p) for p in buffer_ptrs], [int(n) for n in sizes])
            return [0] * len(keys)
        except Error:
            return [INTERNAL_ERROR] * len(keys)

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        return self.batch_get_into([key], [buffer_ptr], [size])[0]

    def batch_get_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> list[int]:
        if not (len(keys) == len(buffer_ptrs) == len(sizes)):
            return [INVALID_PARAMS] * len(keys)
        try:
            got = self._s()._get_addresses(list(keys), [int(p) for p in buffer_ptrs], [int(n) for n in sizes])
        except ValueError:
            return [INVALID_PARAMS] * len(keys)
        except Error:
            return [INTERNAL_ERROR] * len(keys)
        return [OBJECT_NOT_FOUND if n is None else n for n in got]

    # -- existence and removal ---------------------------------------------------------------------

    def is_exist(self, key: str) -> int:
        return self.batch_is_exist([key])[0]

    def batch_is_exist(self, keys: Sequence[str]) -> list[int]:
        try:
            return [1 if found else 0 for found in self._s().batch_exists(keys)]
        except Error:
            return [-1] * len(keys)

    def remove(self, key: str, force: bool = False) -> int:
        try:
            if not self._s().exists(key):
                return OBJECT_NOT_FOUND
            self._s().delete(key)
            return 0
        except NoSuchKey:
            return OBJECT_NOT_FOUND
        except Error:
            return INTERNAL_ERROR

    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        return 0 if int(buffer_ptr) != 0 and int(size) > 0 else INVALID_PARAMS

    def unregister_buffer(self, buffer_ptr: int) -> int:
        return 0

    def health_check(self) -> int:
        try:
            self._s().batch_exists(["__fjord_health__"])
            return 0
        except Error:
            return INTERNAL_ERROR
