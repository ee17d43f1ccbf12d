"""fjord.kv.Store and the Mooncake-store-compatible facade against the real server: batches from and
into caller memory (bytes, numpy arrays, torch tensors) split over several requests, prefix lookup,
misses, a buffer too small, and Mooncake's return conventions, including raw-pointer calls.

Runs under the SDK venv (build/venv-sdk): `build/venv-sdk/bin/python -m pytest -q
tests/integration/test_python_kv.py`; skipped elsewhere."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import pytest

from conftest import unique_bucket_name
from s3util import KiB, MiB

IN_SDK_VENV = "venv-sdk" in Path(sys.prefix).name
try:
    import fjord
    import fjord.kv
    import fjord.mooncake
    import numpy as np
except ImportError as missing:
    if IN_SDK_VENV:
        raise
    pytest.skip(f"needs the fjord package ({missing}): run with build/venv-sdk/bin/python", allow_module_level=True)


@pytest.fixture(scope="module")
def client(fjord_server):
    c = fjord.Client(fjord_server.endpoint, fjord_server.access_key, fjord_server.secret_key, threads=2)
    yield c
    c.close()


@pytest.fixture
def store(client):
    bucket = unique_bucket_name("pykv")
    # Small requests, so that every batch below is split over several requests in flight.
    s = fjord.kv.Store(bucket, client, create=True, capacity_bytes=256 * MiB, request_bytes=256 * KiB,
                       in_flight=3)
    yield s
    for e in client.list(bucket):
        client.delete(bucket, e.key)
    client.delete_bucket(bucket)


def test_batches_round_trip_from_and_into_caller_memory(store):
    rng = np.random.default_rng(7)
    arrays = [rng.integers(0, 255, size=n, dtype=np.uint8) for n in (1, 4096, 100 * KiB, 700 * KiB, 2 * MiB)]
    keys = [f"np/{i}" for i in range(len(arrays))]
    assert store.batch_put_from(keys, arrays) == [True] * len(arrays)
    assert store.batch_put_from(keys[:2], arrays[:2]) == [False, False], "existing blocks are kept"
    outs = [np.zeros(a.size, dtype=np.uint8) for a in arrays]
    assert store.batch_get_into(keys, outs) == [a.size for a in arrays]
    assert all((o == a).all() for o, a in zip(outs, arrays))
    assert store.batch_sizes(keys + ["np/none"]) == [a.size for a in arrays] + [None]


def test_prefix_lookup_counts_the_leading_run_of_hits(store):
    keys = [f"chunk/{i}" for i in range(50)]
    store.batch_put_from(keys[:30], [os.urandom(1000) for _ in range(30)])
    assert store.prefix_lookup(keys) == 30
    assert store.prefix_lookup(["chunk/missing"] + keys) == 0
    assert store.prefix_lookup([]) == 0
    store.delete("chunk/10")
    assert store.prefix_lookup(keys) == 10
    assert store.batch_exists(["chunk/9", "chunk/10", "chunk/11"]) == [True, False, True]


def test_misses_and_buffers_too_small(store):
    store.put("one", b"x" * 5000)
    assert store.get("one") == b"x" * 5000
    assert store.get("absent") is None
    buf = bytearray(100)
    assert store.get_into("absent", buf) is None
    with pytest.raises(fjord.kv.BlockTooLarge):
        store.get_into("one", buf)
    assert store.exists("one") and not store.exists("absent")
    with pytest.raises(TypeError):
        store.get_into("one", b"read-only bytes")


def test_torch_tensors_in_place(store):
    torch = pytest.importorskip("torch")
    t = torch.arange(0, 64 * 1024, dtype=torch.float16)
    assert store.put("tensor/0", t)
    out = torch.empty_like(t)
    assert store.get_into("tensor/0", out) == t.numel() * t.element_size()
    assert torch.equal(out, t)


def test_keys_are_checked(store):
    with pytest.raises(ValueError):
        store.batch_put_from(["a", "b"], [b"1"])
    with pytest.raises(fjord.Error):
        store.batch_exists(["k" * 1025])


def test_mooncake_facade_conventions(fjord_server, monkeypatch):
    monkeypatch.setenv("FJORD_ACCESS_KEY", fjord_server.access_key)
    monkeypatch.setenv("FJORD_SECRET_KEY", fjord_server.secret_key)
    bucket = unique_bucket_name("mooncake")
    m = fjord.mooncake.MooncakeStore()
    assert m.setup("localhost", "P2PHANDSHAKE", 512 * MiB, 128 * MiB, "tcp", "", fjord_server.endpoint,
                   bucket=bucket) == 0
    assert m.put("a", b"alpha") == 0
    assert m.get("a") == b"alpha" and m.get("nope") == b""
    assert m.is_exist("a") == 1 and m.is_exist("nope") == 0
    assert m.batch_is_exist(["a", "nope"]) == [1, 0]
    assert m.get_size("a") == 5 and m.get_size("nope") < 0
    src = (ctypes.c_ubyte * 4096).from_buffer_copy(os.urandom(4096))
    dst = (ctypes.c_ubyte * 4096)()
    assert m.register_buffer(ctypes.addressof(src), 4096) == 0
    assert m.put_from("raw", ctypes.addressof(src), 4096) == 0
    assert m.get_into("raw", ctypes.addressof(dst), 4096) == 4096
    assert bytes(dst) == bytes(src)
    assert m.get_into("nope", ctypes.addressof(dst), 4096) < 0
    srcs = [(ctypes.c_ubyte * 100).from_buffer_copy(bytes([i]) * 100) for i in range(3)]
    assert m.batch_put_from(["p0", "p1", "p2"], [ctypes.addressof(s) for s in srcs], [100] * 3) == [0, 0, 0]
    dsts = [(ctypes.c_ubyte * 100)() for _ in range(4)]
    got = m.batch_get_into(["p0", "p1", "p2", "nope"], [ctypes.addressof(d) for d in dsts], [100] * 4)
    assert got[:3] == [100, 100, 100] and got[3] < 0
    assert [bytes(d) for d in dsts[:3]] == [bytes([i]) * 100 for i in range(3)]
    assert m.batch_put_from(["x"], [1, 2], [1]) == [fjord.mooncake.INVALID_PARAMS]
    assert m.remove("a") == 0 and m.remove("a") == fjord.mooncake.OBJECT_NOT_FOUND
    for key in ("raw", "p0", "p1", "p2"):
        assert m.remove(key) == 0
    assert m.close() == 0
    fjord.Client(fjord_server.endpoint, fjord_server.access_key, fjord_server.secret_key).delete_bucket(bucket)
