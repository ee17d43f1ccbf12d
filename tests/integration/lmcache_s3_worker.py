"""LMCache 0.5.6's own S3 connector (s3://, on awscrt) against a Fjord KV bucket, unmodified: run by
test_connectors.py::test_lmcache_own_s3_connector_on_a_kv_bucket in a private mount namespace whose
/etc/hosts maps <bucket>.localhost to 127.0.0.1, because the connector addresses the bucket only through
the Host header (virtual-hosted style) and this machine resolves no name under localhost.

usage: lmcache_s3_worker.py BUCKET PORT FIRST_HASH; credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
Prints one JSON line: the keys it stored and the SHA-256 of each chunk's bytes, for the test to check
through boto3."""

import asyncio
import hashlib
import json
import os
import sys
import threading

import numpy as np
import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.connector import CreateConnector
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend


def main(bucket: str, port: int, first_hash: int) -> None:
    cfg = LMCacheEngineConfig.from_defaults(
        chunk_size=256, local_cpu=False, max_local_cpu_size=0.1, remote_url=f"s3://{bucket}.localhost:{port}",
        extra_config={"s3_region": "us-east-1", "disable_tls": True, "s3_prefer_http2": False,
                      "s3_num_io_threads": 2, "save_chunk_meta": False,
                      "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
                      "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"]})
    md = LMCacheMetadata(model_name="test/model", world_size=1, local_world_size=1, worker_id=0,
                         local_worker_id=0, kv_dtype=torch.bfloat16, kv_shape=(4, 2, 256, 2, 64), chunk_size=256)
    backend = LocalCPUBackend(cfg, md)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    call = lambda coro: asyncio.run_coroutine_threadsafe(coro, loop).result(60)
    conn = CreateConnector(cfg.remote_url, loop, backend, cfg, md)
    keys = [CacheEngineKey("test/model", 1, 0, first_hash + i, torch.bfloat16) for i in range(3)]
    stored = {}
    for i, key in enumerate(keys):
        obj = backend.allocate(md.get_shapes(), md.get_dtypes(), MemoryFormat.KV_2LTD)
        a = np.frombuffer(obj.byte_array, dtype=np.uint8)
        a[:] = np.random.default_rng(i).integers(0, 256, a.size, dtype=np.uint8)
        data = bytes(obj.byte_array)
        assert call(conn.exists(key)) is False, "a key exists before it was stored"
        call(conn.put(key, obj))  # the connector drops the caller's reference once stored
        assert call(conn.exists(key)) is True, "a stored key does not exist"
        got = call(conn.get(key))
        assert got is not None and bytes(got.byte_array) == data, "a chunk came back different"
        got.ref_count_down()
        stored[key.to_string()] = hashlib.sha256(data).hexdigest()
    missing = CacheEngineKey("test/model", 1, 0, first_hash + 99, torch.bfloat16)
    assert call(conn.get(missing)) is None and call(conn.exists(missing)) is False
    # Not conn.close(): LMCache 0.5.6's S3Connector.close awaits a synchronous executor shutdown that
    # waits for a coroutine on the very loop it blocks, and never returns. The process exits instead.
    print(json.dumps({"stored": stored}), flush=True)
    os._exit(0)  # without tearing down the executor's pending tasks (see above)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
