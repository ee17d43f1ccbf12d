"""NIXL's OBJ backend (the S3 object tier vLLM's kv_offload uses) reading and writing a Fjord KV bucket:
existence probes (HeadObject), WRITE transfers from registered DRAM (PutObject, aws-chunked with a
CRC64NVME trailer), READ transfers into registered DRAM (ranged GetObject), and interplay with plain S3
through boto3 on the same bucket. Real NIXL 1.5.1 on this CPU-only machine, against a real server.

Runs under build/venv-connectors (scripts/connectors_venv.sh) with nixl-cu12 installed:
`build/venv-connectors/bin/python -m pytest -q tests/integration/test_nixl.py`; skipped elsewhere."""

from __future__ import annotations

import itertools
import os
import sys
import time
from pathlib import Path

import pytest

from conftest import make_kv_bucket, unique_bucket_name

IN_CONNECTORS_VENV = "venv-connectors" in Path(sys.prefix).name
try:
    import numpy as np
    # The backend wheel directly, not the `nixl` meta package: the meta package picks nixl_cuXX from
    # the CUDA version of the torch it finds, and the shared torch in this venv is a CUDA 13 build,
    # whose nixl-cu13 OBJ plugin needs libcuobjclient.so.1 (CUDA toolkit) and does not load here.
    from nixl_cu12._api import nixl_agent, nixl_agent_config
except ImportError as missing:
    if IN_CONNECTORS_VENV:
        raise
    pytest.skip(f"needs nixl-cu12 ({missing}): run with build/venv-connectors/bin/python",
                allow_module_level=True)

KiB = 1024
MiB = 1024 * KiB
XFER_DEADLINE_S = 60.0
_obj_dev_ids = itertools.count(1)  # OBJ dev ids map to object keys: unique per registration; 0 = probes


def delete_bucket_and_objects(s3, bucket):
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=o["Key"])
    s3.delete_bucket(Bucket=bucket)


@pytest.fixture(scope="module")
def kv_bucket(s3):
    bucket = unique_bucket_name("nixl")
    make_kv_bucket(s3, bucket, capacity_bytes=256 * MiB)
    yield bucket
    delete_bucket_and_objects(s3, bucket)


@pytest.fixture(scope="module")
def agent(fjord_server, kv_bucket):
    """One NIXL agent with an OBJ backend on the KV bucket, path-style, plain HTTP, explicit keys.
    conftest has already scrubbed AWS_* from the environment; AWS_EC2_METADATA_DISABLED=true is set
    again here so the AWS C++ SDK inside the plugin never tries the instance metadata service (it is
    only consulted without explicit keys, but a lookup would cost seconds of connect timeouts)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        ag = nixl_agent(f"fjord-nixl-{os.getpid()}", nixl_agent_config(backends=[]))
        ag.create_backend("OBJ", {
            "bucket": kv_bucket, "endpoint_override": fjord_server.host, "scheme": "http",
            "use_virtual_addressing": "false", "access_key": fjord_server.access_key,
            "secret_key": fjord_server.secret_key, "region": "us-east-1", "num_threads": "4"})
        yield ag


def exists(agent, keys):
    """query_memory on OBJ descriptors is a HeadObject per key: None when absent."""
    return [r is not None for r in agent.query_memory([(0, 1, 0, k) for k in keys], "OBJ", "OBJ")]


class Dram:
    """One numpy buffer registered as DRAM, cut into blocks of the given sizes (a prepped dlist)."""

    def __init__(self, agent, sizes):
        self.agent = agent
        self.sizes = list(sizes)
        self.offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.buf = np.zeros(sum(self.sizes), dtype=np.uint8)
        base = self.buf.ctypes.data
        self.reg = agent.register_memory([(base, self.buf.nbytes, 0, "")], "DRAM")
        assert self.reg is not None, "register_memory(DRAM) failed"
        self.dlist = agent.prep_xfer_dlist(
            "NIXL_INIT_AGENT", [(base + o, n, 0) for o, n in zip(self.offsets, self.sizes)], "DRAM")
        assert self.dlist, "prep_xfer_dlist(DRAM) failed"

    def block(self, i) -> np.ndarray:
        return self.buf[self.offsets[i]:self.offsets[i] + self.sizes[i]]

    def release(self):
        self.agent.release_dlist_handle(self.dlist)
        self.agent.deregister_memory(self.reg)


@pytest.fixture
def dram(agent):
    made = []

    def factory(sizes):
        made.append(Dram(agent, sizes))
        return made[-1]

    yield factory
    for d in made:
        d.release()


def xfer(agent, op, dram, blocks, keys, offsets=None):
    """One transfer of DRAM blocks to/from objects (block i <-> keys[i], reading from offsets[i]),
    waited for with a deadline; all handles are released whatever happens."""
    offsets = offsets or [0] * len(keys)
    descs = [(off, dram.sizes[b], next(_obj_dev_ids), key) for b, key, off in zip(blocks, keys, offsets)]
    files = agent.register_memory(descs, "OBJ")
    assert files is not None, f"register_memory(OBJ) failed for {keys}"
    obj_handle = handle = None
    try:
        obj_handle = agent.prep_xfer_dlist(agent.name, files.trim())
        assert obj_handle, f"prep_xfer_dlist(OBJ) failed for {keys}"
        handle = agent.make_prepped_xfer(op, dram.dlist, np.array(blocks, dtype=np.int32), obj_handle,
                                         np.arange(len(keys), dtype=np.int32))
        assert handle, f"make_prepped_xfer({op}) failed for {keys}"
        state = agent.transfer(handle)
        deadline = time.monotonic() + XFER_DEADLINE_S
        while state == "PROC":
            if time.monotonic() >= deadline:
                pytest.fail(f"NIXL {op} of {keys} still in progress after {XFER_DEADLINE_S:.0f} s")
            time.sleep(0.005)
            state = agent.check_xfer_state(handle)
        assert state == "DONE", f"NIXL {op} of {keys} ended in state {state} (see the server log)"
    finally:
        if handle:
            agent.release_xfer_handle(handle)
        if obj_handle:
            agent.release_dlist_handle(obj_handle)
        agent.deregister_memory(files)


def test_probe_of_missing_key_says_absent(agent, s3, kv_bucket):
    assert exists(agent, ["__nixl_probe__/connectivity_test", "kv/never/written.bin"]) == [False, False]


def test_nixl_write_then_s3_get_then_nixl_read(agent, dram, s3, kv_bucket, rng):
    sizes = [64 * KiB] * 4 + [1 * MiB]
    keys = [f"model_abc123_r0/0ab/{i:02x}{rng.getrandbits(32):08x}.bin" for i in range(len(sizes))]
    src = dram(sizes)
    src.buf[:] = np.frombuffer(rng.randbytes(src.buf.nbytes), dtype=np.uint8)
    assert exists(agent, keys) == [False] * len(keys)

    xfer(agent, "WRITE", src, list(range(len(keys))), keys)

    assert exists(agent, keys) == [True] * len(keys)
    for i, key in enumerate(keys):  # NIXL wrote plain S3 objects into the KV bucket
        got = s3.get_object(Bucket=kv_bucket, Key=key)
        assert got["ContentLength"] == sizes[i]
        assert got["Body"].read() == src.block(i).tobytes(), f"{key}: boto3 GET differs from what NIXL wrote"

    dst = dram(sizes)
    xfer(agent, "READ", dst, list(range(len(keys))), keys)
    for i, key in enumerate(keys):
        assert np.array_equal(dst.block(i), src.block(i)), f"{key}: NIXL READ differs from NIXL WRITE"

    # In another order, into other blocks: the last three blocks of a fresh buffer get keys 2, 1, 0.
    again = dram([64 * KiB] * 5)
    xfer(agent, "READ", again, [4, 3, 2], keys[:3])
    assert not again.buf[:2 * 64 * KiB].any()
    for b, i in ((4, 0), (3, 1), (2, 2)):
        assert np.array_equal(again.block(b), src.block(i))

    for key in keys:
        s3.delete_object(Bucket=kv_bucket, Key=key)
    assert exists(agent, keys) == [False] * len(keys)


def test_s3_put_then_nixl_read(agent, dram, s3, kv_bucket, rng):
    data = rng.randbytes(256 * KiB + 512)
    key = f"model_abc123_r0/1cd/{rng.getrandbits(32):08x}.bin"
    s3.put_object(Bucket=kv_bucket, Key=key, Body=data)
    assert exists(agent, [key]) == [True]

    whole = dram([len(data)])
    xfer(agent, "READ", whole, [0], [key])
    assert whole.block(0).tobytes() == data, "NIXL READ differs from the boto3 PUT"

    # A READ from an offset inside the object (the OBJ descriptor's addr): a ranged GET.
    part = dram([64 * KiB])
    xfer(agent, "READ", part, [0], [key], offsets=[100 * KiB + 7])
    assert part.block(0).tobytes() == data[100 * KiB + 7:164 * KiB + 7]

    s3.delete_object(Bucket=kv_bucket, Key=key)
    assert exists(agent, [key]) == [False]
