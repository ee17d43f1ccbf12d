"""The KV connectors with the real packages, on this CPU-only machine: LMCache 0.5.6 loading Fjord as a
remote storage plugin (plugin://fjord, through its own CreateConnector and RemoteBackend), and vLLM
0.33.0's tiering offload taking fjord.vllm.FjordSecondaryTierManager as a secondary tier, each round
trip against a real server.

Runs under build/venv-connectors (scripts/connectors_venv.sh, which `make test` runs):
`build/venv-connectors/bin/python -m pytest -q tests/integration/test_connectors.py`; skipped elsewhere."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import make_kv_bucket, unique_bucket_name

IN_CONNECTORS_VENV = "venv-connectors" in Path(sys.prefix).name
try:
    import numpy as np
    import torch
    import fjord
    from lmcache.utils import CacheEngineKey
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.memory_management import MemoryFormat
    from lmcache.v1.metadata import LMCacheMetadata
    from lmcache.v1.storage_backend.connector import CreateConnector
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
    from lmcache.v1.storage_backend.remote_backend import RemoteBackend
    from vllm.v1.kv_offload.base import LookupResult, ReqContext
    from vllm.v1.kv_offload.tiering.base import TransferJob
    import fjord.lmcache  # noqa: F401
    import fjord.vllm
except ImportError as missing:
    if IN_CONNECTORS_VENV:
        raise
    pytest.skip(f"needs lmcache and vllm ({missing}): run with build/venv-connectors/bin/python",
                allow_module_level=True)


@pytest.fixture(autouse=True)
def _credentials(fjord_server, monkeypatch):
    monkeypatch.setenv("FJORD_ACCESS_KEY", fjord_server.access_key)
    monkeypatch.setenv("FJORD_SECRET_KEY", fjord_server.secret_key)


# ---- LMCache ----

def lmcache_config(endpoint, bucket, name="fjord"):
    p = f"remote_storage_plugin.{name}."
    return LMCacheEngineConfig.from_defaults(
        chunk_size=256, local_cpu=False, max_local_cpu_size=0.1, remote_storage_plugins=[name],
        extra_config={p + "module_path": "fjord.lmcache", p + "class_name": "FjordConnectorAdapter",
                      p + "endpoint": endpoint, p + "bucket": bucket, "save_chunk_meta": False})


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


@pytest.fixture
def lmc(fjord_server, loop):
    bucket = unique_bucket_name("lmcache")
    cfg = lmcache_config(fjord_server.endpoint, bucket)
    md = LMCacheMetadata(model_name="test/model", world_size=1, local_world_size=1, worker_id=0,
                         local_worker_id=0, kv_dtype=torch.bfloat16, kv_shape=(4, 2, 256, 2, 64), chunk_size=256)
    backend = LocalCPUBackend(cfg, md)
    conn = CreateConnector("plugin://fjord", loop, backend, cfg, md, plugin_name="fjord")
    run_id = uuid.uuid4().int & ((1 << 60) - 1)

    class Env:
        pass

    env = Env()
    env.cfg, env.md, env.backend, env.conn, env.loop, env.bucket = cfg, md, backend, conn, loop, bucket
    env.key = lambda i: CacheEngineKey("test/model", 1, 0, run_id + i, torch.bfloat16)
    env.call = lambda coro: asyncio.run_coroutine_threadsafe(coro, loop).result(60)

    def new_obj(seed):
        obj = backend.allocate(md.get_shapes(), md.get_dtypes(), MemoryFormat.KV_2LTD)
        a = np.frombuffer(obj.byte_array, dtype=np.uint8)
        a[:] = np.random.default_rng(seed).integers(0, 256, a.size, dtype=np.uint8)
        return obj, bytes(obj.byte_array)

    env.new_obj = new_obj
    yield env
    env.call(conn.close())


def test_lmcache_plugin_round_trip(lmc):
    key, call = lmc.key, lmc.call
    obj, data = lmc.new_obj(1)
    assert call(lmc.conn.exists(key(0))) is False
    call(lmc.conn.put(key(0), obj))
    assert call(lmc.conn.exists(key(0))) is True and lmc.conn.exists_sync(key(0)) is True
    got = call(lmc.conn.get(key(0)))
    assert got is not None and bytes(got.byte_array) == data
    assert tuple(got.tensor.shape) == tuple(lmc.md.get_shapes()[0])
    got.ref_count_down()
    assert call(lmc.conn.get(key(99))) is None
    assert key(0).to_string() in call(lmc.conn.list())
    assert call(lmc.conn.ping()) == 0
    assert lmc.conn.remove_sync(key(0)) and not lmc.conn.exists_sync(key(0))


def test_lmcache_batches_and_consecutive_hits(lmc):
    key, call = lmc.key, lmc.call
    objs = [lmc.new_obj(10 + i) for i in range(3)]
    keys = [key(10 + i) for i in range(3)]
    call(lmc.conn.batched_put(keys, [o for o, _ in objs]))
    assert call(lmc.conn.batched_async_contains("lookup", keys + [key(50)] + keys)) == 3
    assert call(lmc.conn.batched_async_contains("lookup", [key(51)] + keys)) == 0
    got = call(lmc.conn.batched_get(keys + [key(52)]))
    assert [bytes(g.byte_array) for g in got[:3]] == [d for _, d in objs] and got[3] is None
    for g in got[:3]:
        g.ref_count_down()
    prefix = call(lmc.conn.batched_get_non_blocking("lookup", keys + [key(53)] + keys))
    assert len(prefix) == 3
    for g in prefix:
        g.ref_count_down()


def test_lmcache_partial_chunk(lmc):
    inner = lmc.conn.getWrappedConnector()
    n = 100 * inner.single_token_size
    payload = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8).tobytes()
    inner.store.put(lmc.key(70).to_string(), payload)
    g = lmc.call(lmc.conn.get(lmc.key(70)))
    assert g is not None and g.get_size() == n and bytes(g.byte_array) == payload
    g.ref_count_down()


def test_lmcache_remote_backend_path(lmc):
    """The path LMCache itself takes: RemoteBackend(plugin_name) -> CreateConnector -> the adapter."""
    rb = RemoteBackend(lmc.cfg, lmc.md, lmc.loop, lmc.backend, "cpu", plugin_name="fjord")
    assert rb.connection is not None
    objs = [lmc.new_obj(90 + i) for i in range(2)]
    keys = [lmc.key(90 + i) for i in range(2)]
    rb.batched_submit_put_task(keys, [o for o, _ in objs])
    deadline = time.monotonic() + 30
    while not all(rb.contains(k) for k in keys) or any(rb.exists_in_put_tasks(k) for k in keys):
        assert time.monotonic() < deadline, "the puts did not land"
        time.sleep(0.02)
    assert [o.get_ref_count() for o, _ in objs] == [1, 1]
    got = rb.batched_get_blocking(keys + [lmc.key(95)])
    assert [g is not None for g in got] == [True, True, False]
    assert [bytes(g.byte_array) for g in got[:2]] == [d for _, d in objs]
    assert rb.batched_contains(keys + [lmc.key(97)] + keys) == 2
    for g in got[:2]:
        g.ref_count_down()
    for o, _ in objs:
        o.ref_count_down()
    assert rb.remove(keys[0]) and not rb.contains(keys[0])
    rb.close()


def test_lmcache_own_s3_connector_on_a_kv_bucket(fjord_server, s3, tmp_dir):
    """LMCache's built-in S3 connector (remote_url s3://<bucket>.<host>:<port>, awscrt, virtual-hosted
    style) storing and reading chunks in a KV bucket, unmodified (lmcache_s3_worker.py). It names the bucket
    only in the Host header, and nothing under localhost resolves on this machine: the worker runs in a
    private mount namespace whose /etc/hosts maps <bucket>.localhost to 127.0.0.1 (the machine's own file is
    untouched). What it stored is then read back through boto3, byte for byte."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs a private mount namespace (unshare --mount) to resolve <bucket>.localhost")
    bucket = unique_bucket_name("lmcache-s3")
    make_kv_bucket(s3, bucket, capacity_bytes=256 * 1024 * 1024)
    hosts = tmp_dir / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {bucket}.localhost\n")
    worker = Path(__file__).with_name("lmcache_s3_worker.py")
    env = dict(os.environ, AWS_ACCESS_KEY_ID=fjord_server.access_key,
               AWS_SECRET_ACCESS_KEY=fjord_server.secret_key)
    first_hash = random.SystemRandom().getrandbits(40)
    script = f'mount --bind "{hosts}" /etc/hosts && exec "{sys.executable}" "{worker}" {bucket} ' \
             f'{fjord_server.port} {first_hash}'
    result = subprocess.run(["unshare", "--mount", "sh", "-c", script], env=env, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    stored = json.loads(result.stdout.strip().splitlines()[-1])["stored"]
    assert len(stored) == 3
    for key, digest in stored.items():
        body = s3.get_object(Bucket=bucket, Key=key.replace("/", "_"))["Body"].read()
        assert len(body) == 524288 and hashlib.sha256(body).hexdigest() == digest, key
    for key in stored:
        s3.delete_object(Bucket=bucket, Key=key.replace("/", "_"))
    s3.delete_bucket(Bucket=bucket)


def test_lmcache_scheduler_role_without_a_cpu_backend(lmc):
    conn = CreateConnector("plugin://fjord", lmc.loop, None, lmc.cfg, lmc.md, plugin_name="fjord")
    assert lmc.call(conn.batched_async_contains("lookup", [lmc.key(123)])) == 0
    lmc.call(conn.close())


# ---- vLLM ----

def wait_lookup(tier, key, ctx, deadline_s=30):
    deadline = time.monotonic() + deadline_s
    while True:
        result = tier.lookup(key, ctx)
        if result != LookupResult.RETRY:
            return result
        tier.on_schedule_end(None)  # the step ends: the step's lookups go as one batch exists
        assert time.monotonic() < deadline, "the lookup never resolved"
        time.sleep(0.01)


def wait_jobs(tier, count, deadline_s=30):
    done, deadline = [], time.monotonic() + deadline_s
    while len(done) < count:
        done += list(tier.get_finished_jobs())
        assert time.monotonic() < deadline, "jobs did not finish"
        time.sleep(0.01)
    return done


def test_vllm_secondary_tier_store_lookup_load(fjord_server):
    chunks, chunk_bytes = 6, 64 * 1024
    primary = np.zeros((chunks, chunk_bytes), dtype=np.uint8)
    rng = np.random.default_rng(3)
    primary[:3] = rng.integers(0, 256, (3, chunk_bytes), dtype=np.uint8)
    original = primary[:3].copy()
    bucket = unique_bucket_name("vllm")
    tier = fjord.vllm.FjordSecondaryTierManager(None, memoryview(primary), "fjord", endpoint=fjord_server.endpoint,
                                                bucket=bucket, prefix="model-a/r0/")
    ctx = ReqContext(req_id="request-1")
    keys = [uuid.uuid4().bytes + i.to_bytes(4, "big") for i in range(3)]
    assert wait_lookup(tier, keys[0], ctx) == LookupResult.MISS
    tier.submit_store(TransferJob(job_id=1, keys=keys, chunk_ids=np.array([0, 1, 2]), is_promotion=False,
                                  req_context=ctx))
    (stored,) = wait_jobs(tier, 1)
    assert stored.job_id == 1 and stored.success and stored.transfer_bytes == 3 * chunk_bytes
    tier.on_request_finished(ctx)
    ctx2 = ReqContext(req_id="request-2")
    assert [wait_lookup(tier, k, ctx2) for k in keys] == [LookupResult.HIT] * 3
    tier.submit_load(TransferJob(job_id=2, keys=keys, chunk_ids=np.array([3, 4, 5]), is_promotion=True,
                                 req_context=ctx2))
    (loaded,) = wait_jobs(tier, 1)
    assert loaded.success and (primary[3:] == original).all()
    missing = [uuid.uuid4().bytes]
    tier.submit_load(TransferJob(job_id=3, keys=keys[:1] + missing, chunk_ids=np.array([3, 4]),
                                 is_promotion=True, req_context=ctx2))
    (partial,) = wait_jobs(tier, 1)
    assert not partial.success and list(partial.successful_keys) == keys[:1]
    assert not tier.has_pending_work()
    tier.shutdown()
