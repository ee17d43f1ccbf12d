"""A 1 GiB object through boto3, streamed from and to disk: never held in memory. Deselect with
-m "not big"."""

import contextlib
import hashlib

import pytest

import s3util
from s3util import GiB, MiB

pytestmark = [pytest.mark.big, pytest.mark.slow]

BIG_BYTES = 1 * GiB
WRITE_CHUNK_BYTES = 8 * MiB


def write_random_file(path, rng, size_bytes) -> str:
    """Writes `size_bytes` of seeded random data; returns its sha256. Bounded memory."""
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        remaining = size_bytes
        while remaining:
            chunk = rng.randbytes(min(WRITE_CHUNK_BYTES, remaining))
            digest.update(chunk)
            f.write(chunk)
            remaining -= len(chunk)
    return digest.hexdigest()


def read_slice(path, first, size_bytes) -> bytes:
    with open(path, "rb") as f:
        f.seek(first)
        return f.read(size_bytes)


def test_one_gib_round_trip_is_byte_exact(s3, bucket, tmp_dir, rng):
    source = tmp_dir / "big.bin"
    expected_sha256 = write_random_file(source, rng, BIG_BYTES)
    try:
        with open(source, "rb") as body:
            put = s3.put_object(Bucket=bucket, Key="big.bin", Body=body)
        assert put["ResponseMetadata"]["HTTPStatusCode"] == 200

        assert s3.head_object(Bucket=bucket, Key="big.bin")["ContentLength"] == BIG_BYTES
        got = s3.get_object(Bucket=bucket, Key="big.bin")
        assert got["ContentLength"] == BIG_BYTES
        digest, received_bytes = s3util.stream_sha256_hex(got["Body"])
        assert received_bytes == BIG_BYTES
        assert digest == expected_sha256

        # Ranges deep into the object (offsets past any 32-bit-sized buffer arithmetic on the way).
        for first, size_bytes in [(BIG_BYTES - MiB, MiB), (BIG_BYTES // 2 - 7, 3 * MiB + 11)]:
            ranged = s3.get_object(Bucket=bucket, Key="big.bin",
                                   Range=f"bytes={first}-{first + size_bytes - 1}")
            assert ranged["ContentRange"] == f"bytes {first}-{first + size_bytes - 1}/{BIG_BYTES}"
            assert ranged["Body"].read() == read_slice(source, first, size_bytes)
    finally:
        source.unlink(missing_ok=True)
        with contextlib.suppress(Exception):  # free the server's disk; never mask the real failure
            s3.delete_object(Bucket=bucket, Key="big.bin")
