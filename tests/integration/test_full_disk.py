"""A full disk answers an S3 error and corrupts nothing.

The server runs on a small tmpfs mounted for the test (root only: skipped, with the reason, where mounting
is not allowed). Data files are preallocated, so a PUT that does not fit fails before its body is accepted;
objects stored before stay readable, and space freed by deletes can be used again (freed data files are
kept as spares for reuse, but a write that does not fit first takes their space back).
"""

import hashlib
import os
import subprocess

import pytest
from botocore.exceptions import ClientError

from conftest import FjordServer, make_client

FS_BYTES = 48 * 1024 * 1024


@pytest.fixture
def small_fs(tmp_dir):
    mount_point = tmp_dir / "smallfs"
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(mount_point)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def test_full_disk_gives_insufficient_storage_and_keeps_data(small_fs):
    server = FjordServer(small_fs, name="fulldisk")
    server.start()
    try:
        s3 = make_client(server)
        s3.create_bucket(Bucket="full")
        keep = os.urandom(1024 * 1024)
        s3.put_object(Bucket="full", Key="keep", Body=keep)

        with pytest.raises(ClientError) as too_big:
            s3.put_object(Bucket="full", Key="huge", Body=os.urandom(FS_BYTES * 2))
        assert too_big.value.response["Error"]["Code"] == "InsufficientStorage"
        assert too_big.value.response["ResponseMetadata"]["HTTPStatusCode"] == 507

        stored = []
        for i in range(64):
            body = os.urandom(4 * 1024 * 1024)
            try:
                s3.put_object(Bucket="full", Key=f"fill/{i}", Body=body)
            except ClientError as error:
                assert error.response["Error"]["Code"] == "InsufficientStorage"
                break
            stored.append((f"fill/{i}", hashlib.sha256(body).hexdigest()))
        else:
            pytest.fail("the 48 MiB file system never filled up")

        assert s3.get_object(Bucket="full", Key="keep")["Body"].read() == keep
        for key, digest in stored:
            assert hashlib.sha256(s3.get_object(Bucket="full", Key=key)["Body"].read()).hexdigest() == digest
        listed = [o["Key"] for o in s3.list_objects_v2(Bucket="full", Prefix="fill/")["Contents"]]
        assert sorted(listed) == sorted(k for k, _ in stored)
        with pytest.raises(ClientError):
            s3.head_object(Bucket="full", Key="huge")

        for key, _ in stored:
            s3.delete_object(Bucket="full", Key=key)
        # The deleted files are spares now: one of the same size is reused, and a larger object, which no
        # spare fits, gets their space (its preallocation frees them and tries again), on any core.
        again = os.urandom(4 * 1024 * 1024)
        s3.put_object(Bucket="full", Key="again", Body=again)
        assert s3.get_object(Bucket="full", Key="again")["Body"].read() == again
        larger = os.urandom(len(stored) * 4 * 1024 * 1024 - 8 * 1024 * 1024)
        for attempt in range(2):
            s3 = make_client(server)  # a new connection, which may land on another core
            s3.put_object(Bucket="full", Key=f"larger/{attempt}", Body=larger)
            assert s3.get_object(Bucket="full", Key=f"larger/{attempt}")["Body"].read() == larger
            s3.delete_object(Bucket="full", Key=f"larger/{attempt}")

        server.stop()
        server.start()
        s3 = make_client(server)
        assert s3.get_object(Bucket="full", Key="keep")["Body"].read() == keep
        assert s3.get_object(Bucket="full", Key="again")["Body"].read() == again
    finally:
        server.stop()
