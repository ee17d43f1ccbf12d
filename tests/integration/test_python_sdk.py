"""The Python package (python/, `import fjord`) against the real server: the client's object calls,
zero-copy reads and writes with caller memory, multipart and ranged transfers, futures, errors,
threads, fork, pickling, close and interpreter exit, and the fsspec filesystem.

Runs under the SDK venv (build/venv-sdk, made by scripts/python_sdk.sh, which `make test` runs):
`build/venv-sdk/bin/python -m pytest -q tests/integration/test_python_sdk.py`. Under another interpreter
without the package the module is skipped; under the SDK venv a failed import is an error.
"""

from __future__ import annotations

import array
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import REGION
from s3util import MiB

IN_SDK_VENV = "venv-sdk" in Path(sys.prefix).name
try:
    import fjord
    import fsspec
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


def pattern(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8).tobytes()


def test_put_get_head_delete_round_trip(client, bucket):
    for i, size in enumerate([0, 1, 4096, 5 * MiB + 1]):
        data = pattern(size, i)
        info = client.put(bucket, f"k{i}", data)
        assert info.size == size and info.etag
        assert client.head(bucket, f"k{i}") == info
        assert client.get(bucket, f"k{i}") == data
        if size > 10:
            assert client.get(bucket, f"k{i}", offset=3, length=7) == data[3:10]
    client.delete(bucket, "k1")
    assert not client.exists(bucket, "k1")
    client.delete(bucket, "k1")  # deleting a missing key succeeds, as in S3


def test_multipart_and_ranged_transfers_are_byte_exact(fjord_server, client, bucket, s3):
    data = pattern(37 * MiB + 5, 7)
    with fjord.Client(fjord_server.endpoint, fjord_server.access_key, fjord_server.secret_key,
                      multipart_threshold=8 * MiB, part_size=5 * MiB, in_flight=3) as small_parts:
        info = small_parts.put(bucket, "big", data)
    assert info.etag.endswith("-8"), info  # 7 parts of 5 MiB and the rest: a multipart upload
    assert s3.head_object(Bucket=bucket, Key="big")["ContentLength"] == len(data)
    out = bytearray(len(data))
    assert client.get_into(bucket, "big", out, range_size=5 * MiB, in_flight=4) == len(data)
    assert out == data
    part = np.zeros(3 * MiB, dtype=np.uint8)
    assert client.get_into(bucket, "big", part, offset=10 * MiB + 1, exact=True) == 3 * MiB
    assert part.tobytes() == data[10 * MiB + 1:13 * MiB + 1]


def test_reads_never_mix_two_versions(fjord_server, client, bucket):
    old = pattern(12 * MiB, 1)
    first = client.put(bucket, "v", old)
    assert client.get_into(bucket, "v", bytearray(10), if_match=first.etag) == 10
    client.put(bucket, "v", pattern(12 * MiB, 2))
    with pytest.raises(fjord.PreconditionFailed):  # that version is gone
        client.get_into(bucket, "v", bytearray(12 * MiB), if_match=first.etag)
    assert client.get(bucket, "v") == pattern(12 * MiB, 2)
    for hostile in ('x"\r\nX-Injected: 1', "a\x00b", "tab\tin"):  # stays out of the request head
        with pytest.raises(fjord.Error, match="control byte or a quote"):
            client.get_into(bucket, "v", bytearray(10), if_match=hostile)
        with pytest.raises(fjord.Error, match="control byte or a quote"):
            client.put(bucket, "v2", b"x", if_none_match=hostile)
    fs = fsspec.filesystem("fjord", endpoint_url=fjord_server.endpoint, key=fjord_server.access_key,
                           secret=fjord_server.secret_key, skip_instance_cache=True)
    try:
        with fs.open(f"{bucket}/v", "rb", block_size=5 * MiB) as f:
            assert f.read(MiB) == pattern(12 * MiB, 2)[:MiB]
            client.put(bucket, "v", old)  # replaced while open: the next range must not come from it
            with pytest.raises(fjord.PreconditionFailed):
                f.seek(10 * MiB)
                f.read(MiB)
    finally:
        fs.client.close()


def test_reads_and_writes_use_caller_memory(client, bucket):
    data = pattern(3 * MiB, 3)
    src = np.frombuffer(data, dtype=np.uint8).reshape(3, MiB)
    client.put(bucket, "np", src)
    client.put(bucket, "mv", memoryview(data)[MiB:2 * MiB])
    client.put(bucket, "arr", array.array("B", data[:100]))
    dest = np.zeros((3, MiB), dtype=np.uint8)
    assert client.get_into(bucket, "np", dest) == 3 * MiB and dest.tobytes() == data
    window = bytearray(2 * MiB)
    assert client.get_into(bucket, "mv", memoryview(window)[MiB // 2:]) == MiB  # a slice of a buffer
    assert window[MiB // 2:MiB // 2 + MiB] == data[MiB:2 * MiB] and window[:MiB // 2] == bytes(MiB // 2)
    assert client.get(bucket, "arr") == data[:100]
    # a buffer shorter than the object gets its first bytes; a longer one stops at the object's end
    short = bytearray(10)
    assert client.get_into(bucket, "np", short) == 10 and short == data[:10]
    with pytest.raises(TypeError, match="writable"):
        client.get_into(bucket, "np", b"read-only bytes")
    with pytest.raises(TypeError):
        client.put(bucket, "x", np.zeros((4, 4))[:, ::2])  # not contiguous
    with pytest.raises(TypeError):
        client.put(bucket, "x", "a str is not bytes")


def test_async_variants_are_futures(client, bucket):
    datas = [pattern(1000 + i, i) for i in range(64)]
    puts = [client.put_async(bucket, f"a/{i}", d) for i, d in enumerate(datas)]
    assert [f.result(timeout=60).size for f in puts] == [len(d) for d in datas]
    outs = [bytearray(len(d)) for d in datas]
    gets = [client.get_into_async(bucket, f"a/{i}", o) for i, o in enumerate(outs)]
    assert [f.result(timeout=60) for f in gets] == [len(d) for d in datas]
    assert outs == datas
    heads = [client.head_async(bucket, f"a/{i}") for i in (0, 999)]
    assert heads[0].result().size == 1000 and heads[1].result() is None
    failed = client.get_into_async(bucket, "a/missing", bytearray(5))
    with pytest.raises(fjord.NoSuchKey) as e:
        failed.result(timeout=60)
    assert e.value.status == 404 and e.value.request_id
    done = threading.Event()
    client.delete_async(bucket, "a/0").add_done_callback(lambda f: done.set())
    assert done.wait(60) and not client.exists(bucket, "a/0")


def test_listing_follows_pages_and_prefixes(client, bucket):
    keys = [f"dir/{i:04d}" for i in range(1203)] + ["dir/sub/x", "top"]
    futures = [client.put_async(bucket, k, b"x") for k in keys]
    for f in futures:
        f.result(timeout=120)
    listed = [e.key for e in client.list(bucket, "dir/")]
    assert listed == sorted(k for k in keys if k.startswith("dir/"))
    objects, prefixes = client.list_dir(bucket, "dir/")
    assert len(objects) == 1203 and prefixes == ["dir/sub/"]
    assert client.delete_many(bucket, keys) == []
    assert list(client.list(bucket)) == []
    assert bucket in [b.name for b in client.list_buckets()]


def test_errors_name_the_problem(fjord_server, client, bucket):
    with pytest.raises(fjord.NoSuchBucket) as e:
        client.get("no-such-bucket-here", "k")
    assert e.value.code == "NoSuchBucket" and e.value.status == 404 and e.value.request_id
    assert isinstance(e.value, FileNotFoundError)
    with pytest.raises(fjord.NoSuchKey, match="k-missing"):
        client.get(bucket, "k-missing")
    client.put(bucket, "once", b"1")
    with pytest.raises(fjord.PreconditionFailed) as e:
        client.put(bucket, "once", b"2", if_none_match="*")
    assert e.value.status == 412 and client.get(bucket, "once") == b"1"
    with pytest.raises(fjord.InvalidRange):
        client.get(bucket, "once", offset=5)
    bad = fjord.Client(fjord_server.endpoint, fjord_server.access_key, "not-the-secret-key-0123456789")
    try:
        with pytest.raises(fjord.AccessDenied) as e:
            bad.get(bucket, "once")
        assert e.value.code == "SignatureDoesNotMatch" and e.value.status == 403 and e.value.request_id
        assert isinstance(e.value, PermissionError)
    finally:
        bad.close()
    refused = fjord.Client("http://127.0.0.1:1", "k", "s", max_attempts=2, request_timeout=10)
    try:
        with pytest.raises(fjord.TransportError) as e:
            refused.head(bucket, "once")
        assert e.value.status == 0
    finally:
        refused.close()
    with pytest.raises(ValueError, match="endpoint"):
        fjord.Client("ftp://127.0.0.1:9000", "k", "s")
    # A cluster's 409 to a conditional write that crossed another (tests/integration/test_cluster_data.py
    # makes them with real nodes), once the retries are spent: a class of its own, not a bare Error
    from fjord._errors import from_native
    crossed = from_native(("conditional_request_conflict", "crossed", 409, "ConditionalRequestConflict",
                           "r1"), "put")
    assert type(crossed) is fjord.ConditionalRequestConflict and crossed.status == 409
    with pytest.raises(ValueError, match="cannot load the CA certificates /no/such/ca.pem"):
        fjord.Client("https://127.0.0.1:9000", "k", "s", ca_cert="/no/such/ca.pem")


def test_configuration_from_the_environment(fjord_server, bucket, monkeypatch):
    monkeypatch.setenv("FJORD_ENDPOINT", fjord_server.endpoint)
    monkeypatch.setenv("FJORD_ACCESS_KEY", fjord_server.access_key)
    monkeypatch.setenv("FJORD_SECRET_KEY", fjord_server.secret_key)
    with fjord.Client() as c:
        c.put(bucket, "env", b"from the environment")
    for name in ("FJORD_ENDPOINT", "FJORD_ACCESS_KEY", "FJORD_SECRET_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fjord_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", fjord_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", fjord_server.secret_key)
    monkeypatch.setenv("AWS_REGION", REGION)
    with fjord.Client() as c:
        assert c.get(bucket, "env") == b"from the environment"
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    with pytest.raises(ValueError, match="credentials"):
        fjord.Client()


def test_many_threads_share_one_client(client, bucket):
    errors = []

    def worker(t):
        try:
            for i in range(20):
                data = pattern(10000 + i, t * 100 + i)
                client.put(bucket, f"t{t}/{i}", data)
                assert client.get(bucket, f"t{t}/{i}") == data
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_close_waits_for_requests_in_flight(fjord_server, bucket):
    c = fjord.Client(fjord_server.endpoint, fjord_server.access_key, fjord_server.secret_key)
    data = pattern(8 * MiB, 1)
    futures = [c.put_async(bucket, f"c/{i}", data) for i in range(6)]
    c.close()
    assert all(f.done() for f in futures) and [f.result().size for f in futures] == [len(data)] * 6
    with pytest.raises(ValueError, match="closed"):
        c.put(bucket, "after", b"x")


def _run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


def test_fork_child_gets_its_own_threads_and_pickled_clients_work(fjord_server, client, bucket):
    client.put(bucket, "parent", b"before fork")
    pid = os.fork()
    if pid == 0:  # the child: the parent's reactor threads do not exist here
        code = 1
        try:
            client.put(bucket, "child", b"from the child")
            code = 0 if client.get(bucket, "parent") == b"before fork" else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert client.get(bucket, "child") == b"from the child"  # and the parent's client still works
    clone = pickle.loads(pickle.dumps(client))
    try:
        assert clone.get(bucket, "child") == b"from the child"
    finally:
        clone.close()


def test_interpreter_exit_finishes_requests_in_flight(fjord_server, bucket, client):
    result = _run_python(f"""
        import fjord
        c = fjord.Client({fjord_server.endpoint!r}, {fjord_server.access_key!r}, {fjord_server.secret_key!r})
        futures = [c.put_async({bucket!r}, "exit/%d" % i, bytes(1 << 20)) for i in range(8)]
        print("submitted")  # no close(), no result(): the interpreter exits now
    """)
    assert result.returncode == 0, result.stderr
    assert "submitted" in result.stdout
    assert sorted(e.key for e in client.list(bucket, "exit/")) == sorted(f"exit/{i}" for i in range(8))


def test_put_with_a_crc32c_is_verified_by_the_server(client, bucket, s3):
    data = pattern(3 * MiB + 1, 4)
    crc = fjord.crc32c(data)
    client.put(bucket, "checked", data, crc32c=crc)
    head = s3.head_object(Bucket=bucket, Key="checked", ChecksumMode="ENABLED")
    assert head["ChecksumCRC32C"] == __import__("base64").b64encode(crc.to_bytes(4, "big")).decode()
    with pytest.raises(fjord.Error) as e:
        client.put(bucket, "damaged", data, crc32c=crc ^ 1)
    assert e.value.code == "BadDigest" and e.value.status == 400
    assert not client.exists(bucket, "damaged")


def test_crc32c_matches_the_standard_check_value():
    assert fjord.crc32c(b"123456789") == 0xE3069283
    assert fjord.crc32c(b"6789", fjord.crc32c(b"12345")) == 0xE3069283


# -- fsspec -----------------------------------------------------------------------------------------

@pytest.fixture
def fs(fjord_server):
    filesystem = fsspec.filesystem("fjord", endpoint_url=fjord_server.endpoint, key=fjord_server.access_key,
                                   secret=fjord_server.secret_key, skip_instance_cache=True)
    yield filesystem
    filesystem.client.close()


def test_fsspec_files_listing_and_removal(fs, bucket):
    data = pattern(20 * MiB + 3, 5)
    with fs.open(f"fjord://{bucket}/d/file.bin", "wb") as f:
        f.write(data[:MiB])
        f.write(memoryview(data)[MiB:])
    assert fs.info(f"{bucket}/d/file.bin")["size"] == len(data)
    assert fs.info(f"{bucket}/d")["type"] == "directory"
    with fs.open(f"{bucket}/d/file.bin", "rb", block_size=4 * MiB) as f:
        f.seek(7 * MiB + 11)
        assert f.read(5 * MiB) == data[7 * MiB + 11:12 * MiB + 11]
        f.seek(0)
        assert f.read() == data
    assert fs.cat_file(f"{bucket}/d/file.bin", start=-10) == data[-10:]
    fs.pipe_file(f"{bucket}/d/sub/small", b"small")
    assert sorted(fs.ls(f"{bucket}/d", detail=False)) == [f"{bucket}/d/file.bin", f"{bucket}/d/sub"]
    assert fs.cat(f"{bucket}/d/sub/small") == b"small"
    assert fs.exists(f"{bucket}/d/sub/small") and not fs.exists(f"{bucket}/d/nothing")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{bucket}/d/nothing")
    with pytest.raises(RuntimeError):
        with fs.open(f"{bucket}/d/aborted", "wb") as f:
            f.write(b"half")
            raise RuntimeError("the writer failed")
    assert not fs.exists(f"{bucket}/d/aborted")  # a failed write leaves no object
    fs.pipe_file(f"{bucket}/d/once", b"1", mode="create")
    with pytest.raises(FileExistsError):
        fs.pipe_file(f"{bucket}/d/once", b"2", mode="create")
    assert fs.cat_file(f"{bucket}/d/once", start=1) == b""
    fs.rm(f"{bucket}/d", recursive=True)
    assert fs.ls(bucket, detail=False) == []
    with pytest.raises(FileNotFoundError):
        fs.info("no-such-bucket-fsspec")


def test_fsspec_url_to_fs_and_s3_registration(fjord_server, bucket):
    options = dict(endpoint_url=fjord_server.endpoint, key=fjord_server.access_key, secret=fjord_server.secret_key)
    with fsspec.open(f"fjord://{bucket}/via-open", "wb", **options) as f:
        f.write(b"opened by URL")
    import fjord.fsspec
    fjord.fsspec.register_s3()
    fs, path = fsspec.core.url_to_fs(f"s3://{bucket}/via-open", **options)
    assert isinstance(fs, fjord.fsspec.FjordFileSystem)
    assert fs.cat_file(path) == b"opened by URL"


def test_client_over_https_verifies_the_server(make_server, tmp_dir, monkeypatch):
    from tls_ca import CertificateAuthority

    ca = CertificateAuthority(tmp_dir / "ca")
    server = make_server(tls=ca.issue())
    assert server.endpoint.startswith("https://")
    c = fjord.Client(server.endpoint, server.access_key, server.secret_key, threads=2,
                     ca_cert=str(ca.cert_path), part_size=5 * MiB, multipart_threshold=8 * MiB)
    try:
        c.create_bucket("sdk-tls")
        for i, size in enumerate([0, 4096, 11 * MiB + 3]):  # the last as a multipart upload
            data = pattern(size, 100 + i)
            c.put("sdk-tls", f"k{i}", data)
            assert c.get("sdk-tls", f"k{i}") == data
    finally:
        c.close()
    # FJORD_CA_CERT is the default; without any CA the server is not trusted and nothing is sent.
    monkeypatch.setenv("FJORD_CA_CERT", str(ca.cert_path))
    with fjord.Client(server.endpoint, server.access_key, server.secret_key, threads=1) as env_client:
        assert env_client.get("sdk-tls", "k1") == pattern(4096, 101)
    monkeypatch.delenv("FJORD_CA_CERT")
    untrusting = fjord.Client(server.endpoint, server.access_key, server.secret_key, threads=1,
                              max_attempts=1)
    try:
        with pytest.raises(Exception, match="certificate verify failed"):
            untrusting.get("sdk-tls", "k1")
    finally:
        untrusting.close()
