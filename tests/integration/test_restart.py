"""Durability across restarts: a graceful SIGTERM restart loses nothing; after SIGKILL, every
acknowledged write reads back exactly and every key holds one whole version (never a mix)."""

import random
import threading

import pytest
import requests
from botocore.exceptions import BotoCoreError, ClientError

import s3util
from conftest import SEED, unique_bucket_name
from s3util import KiB, MiB

pytestmark = [pytest.mark.restart, pytest.mark.slow]

EDGE_SIZES = [0, 1, 2, 100, 4095, 4096, 4097, 65535, 65536, 65537, MiB - 1, MiB, MiB + 1, 8 * MiB]


def varied_sizes(rng, count):
    sizes = list(EDGE_SIZES)
    while len(sizes) < count:
        sizes.append(int(2 ** rng.uniform(0, 23)))  # log-uniform up to 8 MiB
    return sizes[:count]


def read_sha256(s3, bucket, key):
    """sha256 hex of the object, or None when it does not exist."""
    try:
        digest, _ = s3util.stream_sha256_hex(s3.get_object(Bucket=bucket, Key=key)["Body"])
        return digest
    except ClientError as error:
        assert error.response["Error"]["Code"] == "NoSuchKey", error.response
        return None


def listed_keys(s3, bucket):
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys += [item["Key"] for item in page.get("Contents", [])]
    return keys


def test_sigterm_exits_with_status_zero(make_server):
    server = make_server(name="fjord-sigterm")
    s3 = server.client()
    s3.create_bucket(Bucket=unique_bucket_name("sigterm"))
    assert server.stop() == 0


def test_objects_survive_graceful_restart(make_server, rng):
    server = make_server(name="fjord-graceful")
    s3 = server.client()
    bucket = unique_bucket_name("graceful")
    s3.create_bucket(Bucket=bucket)
    expected, etags = {}, {}
    for index, size_bytes in enumerate(varied_sizes(rng, 50)):
        key = f"objects/{index:03d}-{size_bytes}"
        data = s3util.payload(rng, size_bytes)
        etags[key] = s3.put_object(Bucket=bucket, Key=key, Body=data,
                                   Metadata={"index": str(index)})["ETag"]
        expected[key] = s3util.sha256_hex(data)

    assert server.stop() == 0
    server.start()
    s3 = server.client()

    assert s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert listed_keys(s3, bucket) == sorted(expected)
    for index, (key, digest) in enumerate(expected.items()):
        assert read_sha256(s3, bucket, key) == digest, key
        head = s3.head_object(Bucket=bucket, Key=key)
        assert head["ETag"] == etags[key], key
        assert head["Metadata"] == {"index": str(index)}, key


class PutSeries(threading.Thread):
    """PUTs a deterministic series of objects until one fails, recording every attempt in order and
    whether the server acknowledged it."""

    def __init__(self, s3, bucket, plan):
        super().__init__(daemon=True)
        self.s3, self.bucket, self.plan = s3, bucket, plan
        self.attempts = []          # (key, sha256) in the order they were sent
        self.acknowledged = set()   # indexes into attempts
        self.error = None
        self.stop_requested = threading.Event()

    def run(self):
        for key, seed, size_bytes in self.plan:
            if self.stop_requested.is_set():
                return
            data = random.Random(seed).randbytes(size_bytes)
            self.attempts.append((key, s3util.sha256_hex(data)))
            try:
                response = self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
            except (BotoCoreError, ClientError, requests.RequestException, OSError) as error:
                self.error = error
                return
            if response["ResponseMetadata"]["HTTPStatusCode"] == 200:
                self.acknowledged.add(len(self.attempts) - 1)


def allowed_states(before: dict, attempts, acknowledged) -> dict:
    """For each key, the sha256s (None: absent) it may hold after a crash: its last acknowledged state,
    or any version attempted after that which the crash may or may not have committed."""
    allowed = {key: {state} for key, state in before.items()}
    for index, (key, digest) in enumerate(attempts):
        if index in acknowledged:
            allowed[key] = {digest}
        else:
            allowed.setdefault(key, {None}).add(digest)
    return allowed


def data_files(server):
    return [p for p in (server.data_dirs[0] / "objects").rglob("*") if p.is_file()]


def test_small_objects_live_in_their_records_and_survive_sigkill(make_server, rng):
    """Objects of up to --inline-max-bytes are kept in their journal record, with no data file; a SIGKILL
    amid a series of them, overwrites included, keeps every acknowledged one."""
    server = make_server(name="fjord-inline")
    s3 = server.client()
    bucket = unique_bucket_name("inline")
    s3.create_bucket(Bucket=bucket)
    for size in (1, 100, 4095, 4096):
        s3.put_object(Bucket=bucket, Key=f"edge/{size}", Body=s3util.payload(rng, size))
    assert data_files(server) == [], "objects of at most 4 KiB have no data file"
    s3.put_object(Bucket=bucket, Key="edge/4097", Body=s3util.payload(rng, 4097))
    assert len(data_files(server)) == 1

    plan = []
    for index in range(600):
        key = f"small/{index % 40:02d}" if index % 3 == 0 else f"series/{index:03d}"
        plan.append((key, f"{SEED}:inline:{index}", rng.randrange(1, 4097)))
    writer = PutSeries(server.client(), bucket, plan)
    writer.start()
    try:
        s3util.wait_until(lambda: len(writer.acknowledged) >= 60 or not writer.is_alive(),
                          timeout_s=120, interval_s=0.002, what="60 acknowledged PUTs")
        server.kill()
    finally:
        writer.stop_requested.set()
        writer.join(timeout=60)
    assert not writer.is_alive()
    assert len(writer.acknowledged) >= 60, writer.error

    server.start()
    s3 = server.client()
    allowed = allowed_states({}, writer.attempts, writer.acknowledged)
    actual = {key: read_sha256(s3, bucket, key) for key in allowed}
    for key, digest in actual.items():
        assert digest in allowed[key], f"{key}: holds {digest}, allowed {allowed[key]}"
    assert listed_keys(s3, bucket) == sorted(
        [f"edge/{size}" for size in (1, 100, 4095, 4096, 4097)] +
        [key for key, digest in actual.items() if digest is not None])
    assert len(data_files(server)) == 1, "recovery wrote no data file for an inline object"
    assert server.stop() == 0


def test_inlining_can_be_turned_off(make_server, rng):
    server = make_server(name="fjord-no-inline", extra_args=["--inline-max-bytes", "0"])
    s3 = server.client()
    bucket = unique_bucket_name("noinline")
    s3.create_bucket(Bucket=bucket)
    data = s3util.payload(rng, 100)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    assert len(data_files(server)) == 1
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == data
    # Past the memory budget small objects get data files too (a budget of 0 MiB holds none).
    server.stop()
    server.extra_args = ["--inline-budget-mib", "0"]
    server.start()
    s3 = server.client()
    s3.put_object(Bucket=bucket, Key="k2", Body=data)
    assert len(data_files(server)) == 2
    assert server.stop() == 0


def test_acknowledged_writes_survive_sigkill(make_server, rng):
    server = make_server(name="fjord-sigkill")
    s3 = server.client()
    bucket = unique_bucket_name("sigkill")
    s3.create_bucket(Bucket=bucket)

    # Before the crash, all acknowledged: 20 objects, then 5 overwritten and 5 deleted.
    state = {}
    for index, size_bytes in enumerate(varied_sizes(rng, 20)):
        data = s3util.payload(rng, size_bytes)
        s3.put_object(Bucket=bucket, Key=f"base/{index:02d}", Body=data)
        state[f"base/{index:02d}"] = s3util.sha256_hex(data)
    for index in range(5):
        data = s3util.payload(rng, 1000 + index)
        s3.put_object(Bucket=bucket, Key=f"base/{index:02d}", Body=data)
        state[f"base/{index:02d}"] = s3util.sha256_hex(data)
    for index in range(5, 10):
        assert s3.delete_object(Bucket=bucket, Key=f"base/{index:02d}")["ResponseMetadata"][
            "HTTPStatusCode"] == 204
        state[f"base/{index:02d}"] = None

    # The series: new keys, with every third PUT overwriting one of base/10..19 instead.
    plan = []
    for index in range(400):
        key = f"base/{10 + index % 10:02d}" if index % 3 == 0 else f"series/{index:03d}"
        plan.append((key, f"{SEED}:series:{index}", rng.randrange(16 * KiB, 2 * MiB)))
    writer = PutSeries(server.client(), bucket, plan)
    writer.start()
    try:
        s3util.wait_until(lambda: len(writer.acknowledged) >= 15 or not writer.is_alive(),
                          timeout_s=120, interval_s=0.005, what="15 acknowledged PUTs")
        server.kill()  # SIGKILL, most likely in the middle of a PUT
    finally:
        writer.stop_requested.set()
        writer.join(timeout=60)
    assert not writer.is_alive()
    assert len(writer.acknowledged) >= 15, writer.error
    print(f"sigkill after {len(writer.attempts)} attempts, {len(writer.acknowledged)} acknowledged; "
          f"writer stopped by {writer.error!r}")

    server.start()
    s3 = server.client()
    allowed = allowed_states(state, writer.attempts, writer.acknowledged)
    actual = {key: read_sha256(s3, bucket, key) for key in allowed}
    for key, digest in actual.items():
        assert digest in allowed[key], f"{key}: holds {digest}, allowed {allowed[key]}"
    # The pre-crash overwrites and deletes held (base/00..09 are never touched by the series).
    for index in range(10):
        assert actual[f"base/{index:02d}"] == state[f"base/{index:02d}"]
    # Listing agrees with GET, and shows no key that was never written (no temporary files).
    assert listed_keys(s3, bucket) == sorted(key for key, digest in actual.items() if digest is not None)

    # The server is usable after recovery: overwrite a key that may have been mid-write.
    last_key = writer.attempts[-1][0]
    s3.put_object(Bucket=bucket, Key=last_key, Body=b"after recovery")
    assert s3.get_object(Bucket=bucket, Key=last_key)["Body"].read() == b"after recovery"
    assert server.stop() == 0
