"""A vLLM (0.33) secondary KV-offload tier over a Fjord KV bucket, on the batch API.

vLLM's tiering spec keeps its CPU tier as the primary one and takes further tiers by module path, with no
change to vLLM:

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 8000000000,
        "secondary_tiers": [{"type": "FjordSecondaryTierManager", "module_path": "fjord.vllm",
                             "endpoint": "http://127.0.0.1:9000", "bucket": "vllm-kv"}]}}'

Each offloaded chunk is one block named by its offload key (hex) after `prefix`; a store job is one batch
put of the chunks' rows of the primary tier's memory, a load job one batch get straight into them.
Lookups never block the scheduler: they are collected for a step and answered by one batch exists on
vLLM's lookup thread (AsyncLookupManager), RETRY until then. Importing this module needs vLLM.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import numpy as np
from vllm.v1.kv_offload.base import LookupResult, Medium, OffloadKey, ReqContext, RequestOffloadingContext
from vllm.v1.kv_offload.tiering.async_lookup import AsyncLookupManager
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob

from .kv import Store

logger = logging.getLogger(__name__)


class _BatchLookups(AsyncLookupManager):
    def __init__(self, tier: FjordSecondaryTierManager, tier_type: str):
        super().__init__(tier_type=tier_type)
        self._tier = tier

    def batch_lookup(self, keys: list[OffloadKey], req_context: ReqContext) -> Iterable[bool]:
        try:
            return self._tier._store.batch_exists([self._tier._name(k) for k in keys])
        except Exception:  # a lookup that fails is a miss: the chunk is recomputed
            logger.exception("Fjord tier: batch exists failed")
            return [False] * len(keys)


class FjordSecondaryTierManager(SecondaryTierManager):
    medium: ClassVar[Medium] = Medium.STORAGE

    def __init__(
        self,
        offloading_spec,
        primary_kv_view: memoryview,
        tier_type: str,
        endpoint: str | None = None,
        bucket: str = "vllm-kv",
        prefix: str = "",
        access_key: str | None = None,
        secret_key: str | None = None,
        capacity_bytes: int = 0,
        io_threads: int = 4,
        backpressure_detector=None,
    ):
        super().__init__(
            offloading_spec=offloading_spec,
            primary_kv_view=primary_kv_view,
            tier_type=tier_type,
            backpressure_detector=backpressure_detector,
        )
        self._rows = np.asarray(primary_kv_view).reshape(primary_kv_view.shape[0], -1)
        self._store = Store(
            bucket,
            endpoint=endpoint,
            access_key=access_key,
            secret_key=secret_key,
            create=True,
            capacity_bytes=int(capacity_bytes),
        )
        self._prefix = prefix
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(io_threads)), thread_name_prefix="fjord-tier")
        self._finished: queue.SimpleQueue[JobResult] = queue.SimpleQueue()
        self._in_flight = 0
        self._idle = threading.Condition()
        self._lookups = _BatchLookups(self, tier_type)

    def _name(self, key: OffloadKey) -> str:
        return self._prefix + bytes(key).hex()

    # -- scheduler side ----------------------------------------------------------------------------

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        found = self._lookups.lookup(key, req_context)
        if found is None:
            return LookupResult.RETRY
        return LookupResult.HIT if found else LookupResult.MISS

    def on_schedule_end(self, context) -> None:
        self._lookups.flush()

    def on_request_finished(self, req_context: ReqContext) -> None:
        self._lookups.cleanup(req_context.req_id)

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def submit_store(self, job_metadata: TransferJob) -> None:
        self._submit(self._store_job, job_metadata)

    def submit_load(self, job_metadata: TransferJob) -> None:
        self._submit(self._load_job, job_metadata)

    def get_finished_jobs(self) -> Iterable[JobResult]:
        out = []
        while True:
            try:
                out.append(self._finished.get_nowait())
            except queue.Empty:
                return out

    def has_pending_work(self) -> bool:
        with self._idle:
            return self._in_flight > 0

    def drain_jobs(self) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0)

    def shutdown(self) -> None:
        self.drain_jobs()
        self._lookups.shutdown()
        self._pool.shutdown(wait=True)
        self._store.close()

    # -- transfers (on the tier's threads) ---------------------------------------------------------

    def _submit(self, fn, job: TransferJob) -> None:
        with self._idle:
            self._in_flight += 1
        self._pool.submit(self._run, fn, job)

    def _run(self, fn, job: TransferJob) -> None:
        started = time.monotonic()
        try:
            result = fn(job)
        except Exception:
            logger.exception("Fjord tier: job %s failed", job.job_id)
            result = JobResult(job_id=job.job_id, success=False)
        result.transfer_time = time.monotonic() - started
        self._finished.put(result)
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def _store_job(self, job: TransferJob) -> JobResult:
        keys = list(job.keys)
        rows = [self._rows[int(c)] for c in job.chunk_ids]
        self._store.batch_put_from([self._name(k) for k in keys], rows)
        return JobResult(job_id=job.job_id, success=True, transfer_bytes=sum(r.nbytes for r in rows))

    def _load_job(self, job: TransferJob) -> JobResult:
        keys = list(job.keys)
        rows = [self._rows[int(c)] for c in job.chunk_ids]
        sizes = self._store.batch_get_into([self._name(k) for k in keys], rows)
        loaded = [k for k, n, r in zip(keys, sizes, rows, strict=True) if n == r.nbytes]
        ok = len(loaded) == len(keys)
        return JobResult(
            job_id=job.job_id,
            success=ok,
            successful_keys=None if ok else loaded,
            transfer_bytes=sum(r.nbytes for r in rows[: len(loaded)]) if ok else None,
        )
