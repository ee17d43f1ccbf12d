"""Disk space is taken as body bytes arrive, not when a request declares its length; the space reserved
ahead of received bytes is bounded for the whole server; and each drive keeps a free-space floor below
which new writes get 507 while the disk still has room (deletes and reads keep working).

Each test runs a server on a small tmpfs mounted for it (root only: skipped, with the reason, where
mounting is not allowed)."""

import os
import subprocess

import pytest
from botocore.exceptions import ClientError

import s3util
from conftest import FjordServer, make_client, server_metric
from s3util import MiB, RawConnection

RESERVED = "fjord_space_reserved_ahead_bytes"


def mount_tmpfs(path, size_bytes):
    path.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")


@pytest.fixture
def small_fs(tmp_dir):
    mounted = []

    def make(size_bytes):
        path = tmp_dir / f"fs{len(mounted)}"
        mount_tmpfs(path, size_bytes)
        mounted.append(path)
        return path

    yield make
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def free_bytes(path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def trickling_put(server, bucket, key, declared_bytes, sent_bytes):
    """A signed PUT that declares `declared_bytes` and sends only the first `sent_bytes` of its body."""
    path = s3util.object_path(bucket, key)
    signed = s3util.sign_headers(server.credentials, "PUT", server.host, path,
                                 headers={"content-length": str(declared_bytes)})
    conn = RawConnection("127.0.0.1", server.port)
    conn.send(s3util.raw_request("PUT", path, server.host, signed.headers))
    conn.send(b"t" * sent_bytes)
    return conn


def test_declared_lengths_reserve_space_only_as_bytes_arrive(small_fs):
    fs = small_fs(512 * MiB)
    server = FjordServer(fs, name="trickle", extra_args=["--reserve-ahead-mib", "128", "--min-free-mib", "16",
                                                         "--spare-data-mib", "0"])
    server.start()
    tricklers = []
    try:
        s3 = make_client(server)
        s3.create_bucket(Bucket="space")
        before = free_bytes(fs)
        # A dozen uploads declaring 100 MiB each (1.2 GiB: more than the file system holds), sending 1 KiB.
        for i in range(12):
            tricklers.append(trickling_put(server, "space", f"trickle/{i}", 100 * MiB, 1024))
        # Each reserves at most one 64 MiB step, and all of them together the server's 128 MiB.
        s3util.wait_until(lambda: server_metric(server, RESERVED) == 128 * MiB, timeout_s=20,
                          what="the reserve-ahead budget to fill")
        assert before - free_bytes(fs) <= 128 * MiB + 4 * MiB
        # So another writer is not starved: a 64 MiB PUT goes through while they trickle.
        body = os.urandom(64 * MiB)
        s3.put_object(Bucket="space", Key="honest", Body=body)
        assert s3.get_object(Bucket="space", Key="honest")["Body"].read() == body
        assert server_metric(server, RESERVED) == 128 * MiB
    finally:
        for conn in tricklers:
            conn.close()
    # Cut uploads give their reservations back, and leave no object.
    s3util.wait_until(lambda: server_metric(server, RESERVED) == 0, timeout_s=20, what="the reservations to go")
    assert s3.list_objects_v2(Bucket="space", Prefix="trickle/")["KeyCount"] == 0
    server.stop()


def test_new_writes_get_507_at_the_free_space_floor_and_the_disk_keeps_room(small_fs):
    fs = small_fs(96 * MiB)
    server = FjordServer(fs, name="floor", extra_args=["--min-free-mib", "24"])
    server.start()
    try:
        s3 = make_client(server)
        s3.create_bucket(Bucket="floor")
        kept = os.urandom(40 * MiB)
        s3.put_object(Bucket="floor", Key="kept", Body=kept)
        # 96 MiB - 40 MiB leaves ~56 MiB; 40 MiB more would leave less than the floor.
        with pytest.raises(ClientError) as refused:
            s3.put_object(Bucket="floor", Key="too-much", Body=os.urandom(40 * MiB))
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 507
        assert refused.value.response["Error"]["Code"] == "InsufficientStorage"
        assert free_bytes(fs) >= 24 * MiB, "the floor is kept free"
        # A multipart part past the floor is refused the same way; the upload can still be aborted.
        upload = s3.create_multipart_upload(Bucket="floor", Key="mp")["UploadId"]
        with pytest.raises(ClientError) as part:
            s3.upload_part(Bucket="floor", Key="mp", UploadId=upload, PartNumber=1, Body=os.urandom(40 * MiB))
        assert part.value.response["ResponseMetadata"]["HTTPStatusCode"] == 507
        s3.abort_multipart_upload(Bucket="floor", Key="mp", UploadId=upload)
        # Reads, small writes, metadata and deletes keep working; the space a delete frees is usable.
        assert s3.get_object(Bucket="floor", Key="kept")["Body"].read() == kept
        s3.put_object(Bucket="floor", Key="small", Body=b"s" * 1024)
        s3.delete_object(Bucket="floor", Key="kept")
        again = os.urandom(40 * MiB)
        s3.put_object(Bucket="floor", Key="again", Body=again)
        assert s3.get_object(Bucket="floor", Key="again")["Body"].read() == again
    finally:
        server.stop()
