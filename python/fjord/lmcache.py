"""An LMCache (0.5.x) remote storage plugin over a Fjord KV bucket, on the batch API.

LMCache configuration (docs/kv.md):

    remote_storage_plugins: ["fjord"]
    extra_config:
      remote_storage_plugin.fjord.module_path: fjord.lmcache
      remote_storage_plugin.fjord.class_name: FjordConnectorAdapter
      remote_storage_plugin.fjord.endpoint: http://127.0.0.1:9000   # else FJORD_ENDPOINT / AWS_ENDPOINT_URL
      remote_storage_plugin.fjord.bucket: lmcache                    # made as a KV bucket if missing
      save_chunk_meta: false

Each chunk is one block named by CacheEngineKey.to_string(), its bytes exactly the MemoryObj's; batched
get/put go as one batch request each, and batched_async_contains is one batch exists answering the
length of the leading run of hits. Importing this module needs lmcache (and so torch).
"""

from __future__ import annotations

import asyncio
import builtins

from lmcache.v1.storage_backend.connector import ConnectorAdapter, ConnectorContext
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from .kv import Store


class FjordConnector(RemoteConnector):
    def __init__(self, loop, local_cpu_backend, config, plugin_name: str | None = None, metadata=None):
        # The scheduler role hands a SafeLocalCPUBackend stub with no .config/.metadata: use the context's.
        config = config if config is not None else local_cpu_backend.config
        super().__init__(config, metadata if metadata is not None else local_cpu_backend.metadata)
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        name = plugin_name or "fjord"
        extra = (config.extra_config if config is not None else None) or {}

        def option(field, default=None):
            return extra.get(f"remote_storage_plugin.{name}.{field}", default)

        # The Store makes (and so owns, and closes) its Client.
        self.store = Store(
            option("bucket", "lmcache"),
            endpoint=option("endpoint"),
            access_key=option("access_key"),
            secret_key=option("secret_key"),
            create=True,
            capacity_bytes=int(option("capacity_bytes", 0)),
        )

    @staticmethod
    def _name(key) -> str:
        return key.to_string()

    async def _in_thread(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def _allocate(self):
        return self.local_cpu_backend.allocate(self.meta_shapes, self.meta_dtypes, self.meta_fmt)

    async def exists(self, key) -> bool:
        return await self._in_thread(self.store.exists, self._name(key))

    def exists_sync(self, key) -> bool:
        return self.store.exists(self._name(key))

    async def get(self, key):
        return (await self.batched_get([key]))[0]

    async def put(self, key, memory_obj) -> None:
        await self.batched_put([key], [memory_obj])

    async def list(self) -> builtins.list[str]:
        return await self._in_thread(lambda: [e.key for e in self.store.client.list(self.store.bucket)])

    async def close(self) -> None:
        self.store.close()

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys) -> builtins.list[object | None]:
        objs = [self._allocate() for _ in keys]
        wanted = [(k, o) for k, o in zip(keys, objs, strict=True) if o is not None]
        try:
            sizes = (
                await self._in_thread(
                    self.store.batch_get_into, [self._name(k) for k, _ in wanted], [o.byte_array for _, o in wanted]
                )
                if wanted
                else []
            )
        except BaseException:
            for _, o in wanted:
                o.ref_count_down()
            raise
        got = dict(zip((id(o) for _, o in wanted), sizes, strict=True))
        out: list[object | None] = []
        for obj in objs:
            n = got.get(id(obj)) if obj is not None else None
            if obj is None or n is None:
                if obj is not None:
                    obj.ref_count_down()
                out.append(None)
            elif n < obj.get_size():
                out.append(self.reshape_partial_chunk(obj, n))
            else:
                out.append(obj)
        return out

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys, memory_objs) -> None:
        # The caller (LMCache's instrumented wrapper) drops its references afterwards; none are taken here.
        await self._in_thread(
            self.store.batch_put_from, [self._name(k) for k in keys], [o.byte_array for o in memory_objs]
        )

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys, pin: bool = False) -> int:
        return await self._in_thread(self.store.prefix_lookup, [self._name(k) for k in keys])

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys) -> int:
        return self.store.prefix_lookup([self._name(k) for k in keys])

    async def batched_get_non_blocking(self, lookup_id: str, keys) -> builtins.list[object]:
        objs = await self.batched_get(keys)
        out = []
        for i, obj in enumerate(objs):
            if obj is None:
                for rest in objs[i + 1 :]:
                    if rest is not None:
                        rest.ref_count_down()
                break
            out.append(obj)
        return out

    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        try:
            await self._in_thread(self.store.batch_exists, ["__fjord_ping__"])
            return 0
        except Exception:
            return 1

    def remove_sync(self, key) -> bool:
        self.store.delete(self._name(key))
        return True


class FjordConnectorAdapter(ConnectorAdapter):
    """Selected by remote_storage_plugins: ["fjord"] (or "fjord.<instance>")."""

    def __init__(self) -> None:
        super().__init__("plugin://fjord")

    def can_parse(self, url: str) -> bool:
        # "plugin://fjord" or "plugin://fjord.<instance>", not "plugin://fjordx"
        return url.startswith("plugin://") and url[len("plugin://") :].split(".", 1)[0] == "fjord"

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        return FjordConnector(
            context.loop, context.local_cpu_backend, context.config, context.plugin_name, context.metadata
        )
