"""s3torchconnector (Amazon's S3 connector for PyTorch, on the AWS CRT through mountpoint-s3-client) against
Fjord: S3Checkpoint with torch.save / torch.load, raw S3Writer / S3Reader (sequential and range-based
readers, seeks and partial reads), S3MapDataset / S3IterableDataset over a listing of more than one page,
torch.distributed.checkpoint through s3torchconnector.dcp.S3StorageWriter / S3StorageReader, overwrites,
missing keys, and the copy and delete that s3torchconnector exposes.

Runs under the torch venv (.venv-torch, made by scripts/bootstrap.sh; `make integration` runs this file with
it): `.venv-torch/bin/python -m pytest -q tests/integration/test_s3torchconnector.py`. Under any other
interpreter without torch the module is skipped; under the torch venv a failed import is an error.

What the client does (s3torchconnector 1.5.0, mountpoint-s3-client 0.14.1), seen through a logging proxy:
- Every S3Writer upload is a multipart upload, even of 0 or 1 byte (CreateMultipartUpload, UploadPart of
  `part_size` bytes, default 8 MiB, CompleteMultipartUpload), with `x-amz-content-sha256: UNSIGNED-PAYLOAD`.
- Every GET is ranged: a full read asks for `Range: bytes=0-<part_size-1>` first and fetches the other
  parts in parallel once Content-Range gives the size (with If-Match on the first ETag). The range-based
  reader sends HEAD, then one ranged GET per buffer fill.
- Listing is ListObjectsV2 with `max-keys=1000` (fixed in the datasets) and
  `x-amz-optional-object-attributes: RestoreStatus`.
- Copy and delete are only reachable through `S3FileSystem.rename` (copy, then DeleteObject) and `rm_file`
  (DeleteObject). The CRT copies an object under 1 GiB with one CopyObject (`x-amz-copy-source` with each key
  segment percent-encoded) and a larger one with CreateMultipartUpload, UploadPartCopy with
  `x-amz-copy-source-range`, CompleteMultipartUpload: both are tested. s3torchconnector has no batch delete
  (DeleteObjects), so none is tested here; test_copy_delete.py covers it with boto3.

"No warnings": Python warnings are errors in this module; the client's Rust and CRT log is switched on at
WARN (S3_TORCH_CONNECTOR_DEBUG_LOGS) into the session directory, and after each test every new WARN or
ERROR line fails it, except the CRT's credential-chain probes at client construction (no profile, no web
identity, no DMI files on this machine) and the 404s (or, for an empty object, 416s) a test provokes.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import logging
import math
import os
import re
import sys
import warnings
from pathlib import Path

import pytest

import s3util
from conftest import _SESSION_TMP, REGION
from s3util import MiB

CLIENT_LOG_DIR = _SESSION_TMP / "s3torchconnector-logs"
# Read by s3torchconnectorclient when it is imported: set before the import below.
os.environ["S3_TORCH_CONNECTOR_DEBUG_LOGS"] = "warn"
os.environ["S3_TORCH_CONNECTOR_LOGS_DIR_PATH"] = str(CLIENT_LOG_DIR)

IN_TORCH_VENV = "venv-torch" in Path(sys.prefix).name
try:
    import torch
    import torch.distributed.checkpoint as dcp
    from s3torchconnector import (S3Checkpoint, S3ClientConfig, S3Exception, S3IterableDataset,
                                  S3MapDataset, S3ReaderConstructor)
    from s3torchconnector.dcp import S3FileSystem, S3StorageReader, S3StorageWriter
except ImportError as missing:
    if IN_TORCH_VENV:
        raise
    pytest.skip(f"needs torch and s3torchconnector ({missing}): run this file with .venv-torch/bin/python",
                allow_module_level=True)

pytestmark = pytest.mark.filterwarnings("error")

PART_BYTES = 8 * MiB  # S3ClientConfig's default part_size
BIG_BYTES = 40 * MiB + 3  # six parts of 8 MiB, the last one 3 bytes
SIZES = [0, 1, 5 * MiB + 1, BIG_BYTES]

# An empty object: the CRT's first ranged GET gets 416 InvalidRange with <ActualObjectSize>0</ActualObjectSize>,
# which the CRT takes as "empty object" and re-sends the GET without a range (logging the 416 on the way).
EMPTY_OBJECT_NOTE = "416 with ActualObjectSize, then a GET without Range"

# ---------------------------------------------------------------------------------------------------
# The client's own log: no WARN or ERROR lines
# ---------------------------------------------------------------------------------------------------

LOG_LEVEL = re.compile(r"^\S+\s+(WARN|ERROR)\s")
# Printed while the CRT builds its default credential chain, whatever the credentials end up being.
CONSTRUCTION_NOISE = [
    re.compile(r"awscrt::AuthCredentialsProvider: .*(Profile credentials provider could not load a profile"
               r"|Failed to resolve either region, role arn or token file path"
               r"|Profile credentials parser could not load"
               r"|Failed to build config profile collection)"),
    re.compile(r"awscrt::common-io: static: Failed to open file\. path:'(/sys/devices/virtual/dmi/id/"
               r"|[^']*/\.aws/)"),
]
NOT_FOUND_LINES = [  # a 404 that a test provokes, logged by the CRT and by the client's exception mapping
    re.compile(r"awscrt::S3MetaRequest: .*Meta request cannot recover from error 14343 .*response status=404"),
    re.compile(r"mountpoint_s3_client::s3_crt_client: .*response_status: 404"),
    re.compile(r"_mountpoint_s3_client::exception: ERROR: S3Exception: "
               r"(Service error: The (key|object|bucket) (does not exist|was not found)|.*NoSuchBucket)"),
]


def _log_sizes() -> dict[Path, int]:
    return {p: p.stat().st_size for p in CLIENT_LOG_DIR.glob("s3torchconnectorclient.log*")}


def _new_log_lines(before: dict[Path, int]) -> list[str]:
    lines = []
    for path in sorted(CLIENT_LOG_DIR.glob("s3torchconnectorclient.log*")):
        with open(path, "rb") as f:
            f.seek(before.get(path, 0))
            lines += f.read().decode(errors="replace").splitlines()
    return lines


RANGE_NOT_SATISFIABLE_LINES = [  # EMPTY_OBJECT_NOTE, as the client logs it
    re.compile(r"awscrt::S3MetaRequest: .*Meta request cannot recover from error 14343 .*response status=416"),
    re.compile(r"mountpoint_s3_client::s3_crt_client: .*response_status: 416"),
    re.compile(r"_mountpoint_s3_client::exception: ERROR: S3Exception: .*response_status: 416"),
]


@pytest.fixture(autouse=True)
def client_quiet(caplog, capfd):
    """Fails the test if the client logged a WARN or ERROR line that is not expected, if a Python logger
    of s3torchconnector warned, or if anything printed a warning or error to stdout / stderr. A test that
    provokes errors on purpose adds their patterns to the list this fixture returns."""
    allowed = list(CONSTRUCTION_NOISE)
    before = _log_sizes()
    yield allowed
    unexpected = [line for line in _new_log_lines(before)
                  if LOG_LEVEL.match(line) and not any(p.search(line) for p in allowed)]
    assert not unexpected, "s3torchconnector client log:\n" + "\n".join(unexpected)
    py_warnings = [r for r in caplog.get_records("call")
                   if r.levelno >= logging.WARNING and r.name.startswith(("s3torchconnector", "tenacity"))]
    assert not py_warnings, [r.getMessage() for r in py_warnings]
    out, err = capfd.readouterr()
    for word in ("warn", "error", "traceback"):
        assert word not in (out + err).lower(), f"{word!r} printed:\n{out}\n{err}"


# ---------------------------------------------------------------------------------------------------
# Client setup
# ---------------------------------------------------------------------------------------------------

def client_config(part_size: int = PART_BYTES) -> S3ClientConfig:
    """Path-style addressing, and one attempt: a server error must reach the test, not be retried away."""
    return S3ClientConfig(force_path_style=True, max_attempts=1, part_size=part_size)


@pytest.fixture(scope="module")
def torch_env(fjord_server):
    """Credentials for the CRT's default chain, and AWS_ENDPOINT_URL: S3StorageWriter, S3StorageReader and
    S3FileSystem take no endpoint argument, the client reads it from the environment. (conftest has already
    removed every AWS_* variable of the machine: no session token or profile gets in.)"""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", fjord_server.access_key)
        mp.setenv("AWS_SECRET_ACCESS_KEY", fjord_server.secret_key)
        mp.setenv("AWS_ENDPOINT_URL", fjord_server.endpoint)
        mp.setenv("AWS_REGION", REGION)
        yield fjord_server


@pytest.fixture(scope="module")
def checkpoint(torch_env) -> S3Checkpoint:
    return S3Checkpoint(region=REGION, endpoint=torch_env.endpoint, s3client_config=client_config())


READERS = {
    "default": None,  # S3Checkpoint.reader: the sequential reader
    "sequential": lambda: S3ReaderConstructor.sequential(),
    "range_based": lambda: S3ReaderConstructor.range_based(),
    "range_based_unbuffered": lambda: S3ReaderConstructor.range_based(buffer_size=0),
}


def open_reader(torch_env, checkpoint, uri: str, kind: str):
    """An S3Reader of the given kind, through the public API that offers it."""
    if READERS[kind] is None:
        return checkpoint.reader(uri)
    dataset = S3MapDataset.from_objects(uri, region=REGION, endpoint=torch_env.endpoint,
                                        s3client_config=client_config(), reader_constructor=READERS[kind]())
    return dataset[0]


def expected_parts(size_bytes: int, part_bytes: int = PART_BYTES) -> int:
    return max(1, math.ceil(size_bytes / part_bytes))


def write_through_writer(checkpoint, uri: str, data: bytes, chunk_bytes: int = MiB + 7):
    with checkpoint.writer(uri) as writer:
        for start in range(0, len(data), chunk_bytes):
            assert writer.write(data[start:start + chunk_bytes]) == len(data[start:start + chunk_bytes])
        assert writer.tell() == len(data)


def stored(s3, bucket: str, key: str) -> tuple[bytes, str]:
    response = s3.get_object(Bucket=bucket, Key=key)
    return response["Body"].read(), response["ETag"].strip('"')


# ---------------------------------------------------------------------------------------------------
# S3Checkpoint with torch.save / torch.load
# ---------------------------------------------------------------------------------------------------

def test_checkpoint_torch_save_load(checkpoint, s3, bucket, rng):
    generator = torch.Generator().manual_seed(rng.randrange(2**63))
    state = {
        "weight": torch.randn(2048, 1024, generator=generator),  # 8 MiB
        "bias": torch.randn(1024, generator=generator, dtype=torch.float64),
        "embedding": torch.randn(512, 1024, generator=generator).to(torch.bfloat16),  # 1 MiB
        "counts": torch.randint(0, 2**62, (4096,), generator=generator),
        "meta": {"epoch": 3, "name": "fjord", "lr": 0.125},
    }
    local = io.BytesIO()
    torch.save(state, local)
    uri = f"s3://{bucket}/ckpt/model.pt"

    with checkpoint.writer(uri) as writer:
        torch.save(state, writer)

    data, etag = stored(s3, bucket, "ckpt/model.pt")
    assert len(data) > PART_BYTES
    assert etag.endswith(f"-{expected_parts(len(data))}"), etag  # it went up as a multipart upload
    assert data == local.getvalue()  # torch.save is deterministic: the server holds exactly its bytes
    loaded = torch.load(checkpoint.reader(uri), weights_only=True)
    assert loaded.keys() == state.keys() and loaded["meta"] == state["meta"]
    for name in ("weight", "bias", "embedding", "counts"):
        assert loaded[name].dtype == state[name].dtype
        assert torch.equal(loaded[name], state[name]), name


# ---------------------------------------------------------------------------------------------------
# S3Writer and S3Reader
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("part_bytes", [PART_BYTES, 5 * MiB], ids=["8MiB-parts", "5MiB-parts"])
@pytest.mark.parametrize("size_bytes", SIZES)
def test_writer_stores_exact_bytes(torch_env, s3, bucket, rng, size_bytes, part_bytes):
    checkpoint = S3Checkpoint(region=REGION, endpoint=torch_env.endpoint,
                              s3client_config=client_config(part_bytes))
    data = s3util.payload(rng, size_bytes)
    write_through_writer(checkpoint, f"s3://{bucket}/raw.bin", data)
    back, etag = stored(s3, bucket, "raw.bin")
    assert len(back) == size_bytes and s3util.sha256_hex(back) == s3util.sha256_hex(data)
    assert etag.endswith(f"-{expected_parts(size_bytes, part_bytes)}"), etag


@pytest.mark.parametrize("kind", list(READERS))
@pytest.mark.parametrize("size_bytes", SIZES)
def test_reader_full_read(torch_env, checkpoint, s3, bucket, rng, size_bytes, kind, client_quiet):
    """Sequential readers GET with a range first (an empty object answers 416 with its size, then a GET
    without range); range-based readers learn the size from HEAD, so an empty object needs no GET at all."""
    if size_bytes == 0 and not kind.startswith("range_based"):
        client_quiet.extend(RANGE_NOT_SATISFIABLE_LINES)
    data = s3util.payload(rng, size_bytes)
    s3.put_object(Bucket=bucket, Key="obj.bin", Body=data)
    reader = open_reader(torch_env, checkpoint, f"s3://{bucket}/obj.bin", kind)
    back = reader.read()
    assert len(back) == size_bytes and back == data
    assert reader.read() == b"" and reader.tell() == size_bytes


@pytest.mark.parametrize("kind", list(READERS))
def test_reader_seek_and_partial_reads(torch_env, checkpoint, bucket, rng, kind):
    """Reads that start and end inside parts and across the 8 MiB part boundaries, every whence, readinto,
    and reads at and past the end, on an object the S3Writer uploaded in six parts."""
    data = s3util.payload(rng, BIG_BYTES)
    uri = f"s3://{bucket}/seek.bin"
    write_through_writer(checkpoint, uri, data)
    reader = open_reader(torch_env, checkpoint, uri, kind)
    assert reader.seekable() and reader.readable() and not reader.writable()

    assert reader.read(10) == data[:10] and reader.tell() == 10
    boundary = 2 * PART_BYTES
    assert reader.seek(boundary - 5) == boundary - 5
    assert reader.read(11) == data[boundary - 5:boundary + 6]
    assert reader.seek(3 * MiB, io.SEEK_CUR) == boundary + 6 + 3 * MiB
    assert reader.read(PART_BYTES + 17) == data[boundary + 6 + 3 * MiB:boundary + 6 + 3 * MiB + PART_BYTES + 17]
    assert reader.seek(PART_BYTES - 1) == PART_BYTES - 1  # backwards
    buffer = bytearray(4 * MiB)
    assert reader.readinto(buffer) == len(buffer)
    assert bytes(buffer) == data[PART_BYTES - 1:PART_BYTES - 1 + len(buffer)]
    assert reader.seek(-100, io.SEEK_END) == BIG_BYTES - 100
    assert reader.read(1000) == data[-100:]  # short read at the end
    assert reader.read(1) == b"" and reader.tell() == BIG_BYTES
    assert reader.seek(BIG_BYTES + 50) == BIG_BYTES  # past the end stays at the end
    assert reader.read() == b""
    assert reader.seek(5) == 5
    assert reader.read() == data[5:]


def test_overwrite_then_read_back(torch_env, checkpoint, s3, bucket, rng):
    """Each write replaces the whole object: a smaller one after a larger one leaves no tail behind, and
    readers made afterwards see only the newest bytes."""
    uri = f"s3://{bucket}/over.bin"
    for size_bytes in (12 * MiB + 1, MiB + 5, 9 * MiB):
        data = s3util.payload(rng, size_bytes)
        write_through_writer(checkpoint, uri, data)
        for kind in ("default", "range_based"):
            assert open_reader(torch_env, checkpoint, uri, kind).read() == data, (size_bytes, kind)
        back, etag = stored(s3, bucket, "over.bin")
        assert back == data and etag.endswith(f"-{expected_parts(size_bytes)}")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["over.bin"]


@pytest.mark.parametrize("kind", list(READERS))
def test_missing_key_and_bucket_raise_clear_errors(torch_env, checkpoint, bucket, kind, client_quiet):
    client_quiet.extend(NOT_FOUND_LINES)
    with pytest.raises(S3Exception) as missing_key:
        open_reader(torch_env, checkpoint, f"s3://{bucket}/no/such/key", kind).read()
    assert re.search(r"The (key does not exist|object was not found)", str(missing_key.value)), missing_key.value

    with pytest.raises(S3Exception) as missing_bucket:
        open_reader(torch_env, checkpoint, f"s3://{bucket}-absent/key", kind).read()
    assert re.search(r"bucket does not exist|NoSuchBucket|object was not found", str(missing_bucket.value)), \
        missing_bucket.value


def test_writer_to_missing_bucket_raises(checkpoint, bucket, client_quiet):
    client_quiet.extend(NOT_FOUND_LINES)
    with pytest.raises(S3Exception, match="NoSuchBucket"):
        with checkpoint.writer(f"s3://{bucket}-absent/key") as writer:
            writer.write(b"x")


# ---------------------------------------------------------------------------------------------------
# Datasets: a listing of more than one page
# ---------------------------------------------------------------------------------------------------

DATASET_OBJECTS = 1050  # the datasets list with max-keys=1000, so this takes a second page
ODD_KEYS = ["ds/odd key+plus.bin", "ds/ümlaut/ß.bin", "ds/percent%2Fslash.bin", "ds/tilde~(paren).bin"]


def test_map_and_iterable_datasets_list_every_page(torch_env, s3, bucket, rng):
    contents = {f"ds/{i:05d}.bin": s3util.payload(rng, rng.randrange(0, 300) + 1) for i in range(DATASET_OBJECTS)}
    contents.update({key: key.encode() for key in ODD_KEYS})
    outside = {"ds": b"prefix itself", "ds-other/0.bin": b"sibling", "other/ds/0.bin": b"elsewhere"}
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda item: s3.put_object(Bucket=bucket, Key=item[0], Body=item[1]),
                      list(contents.items()) + list(outside.items())))
    expected_keys = sorted(contents)  # S3 order: by UTF-8 bytes, which sorted() matches for these keys

    def read(reader):
        return reader.key, reader.read()

    common = dict(region=REGION, endpoint=torch_env.endpoint, s3client_config=client_config(), transform=read)
    map_dataset = S3MapDataset.from_prefix(f"s3://{bucket}/ds/", **common)
    assert len(map_dataset) == len(expected_keys)
    map_items = [map_dataset[i] for i in range(len(map_dataset))]
    assert [key for key, _ in map_items] == expected_keys
    assert all(contents[key] == value for key, value in map_items)

    iterable = S3IterableDataset.from_prefix(f"s3://{bucket}/ds/", **common)
    loader = torch.utils.data.DataLoader(iterable, batch_size=None, num_workers=0)
    iter_items = list(loader)
    assert [key for key, _ in iter_items] == expected_keys
    assert all(contents[key] == value for key, value in iter_items)

    picked = S3MapDataset.from_objects([f"s3://{bucket}/{key}" for key in ODD_KEYS], **common)
    assert [picked[i] for i in range(len(picked))] == [(key, key.encode()) for key in ODD_KEYS]


# ---------------------------------------------------------------------------------------------------
# torch.distributed.checkpoint through s3torchconnector.dcp
# ---------------------------------------------------------------------------------------------------

class Model(torch.nn.Module):
    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.encoder = torch.nn.Linear(1024, 2048)  # 8 MiB of weights
        self.decoder = torch.nn.Linear(2048, 1024)  # 8 MiB
        self.norm = torch.nn.LayerNorm(1024)
        self.embedding = torch.nn.Embedding(1000, 256).to(torch.bfloat16)
        self.register_buffer("steps", torch.randint(0, 2**40, (64,)))


def single_process(call):
    """DCP without a process group: torch warns that it assumes a single process; that is the one warning
    allowed here (it is torch's, about the mode, not about storage)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    others = [w for w in caught if "torch.distributed is disabled" not in str(w.message)]
    assert not others, [str(w.message) for w in others]
    return result


DCP_READERS = {
    "dcp_optimized": lambda: None,  # S3StorageReader's default
    "sequential": lambda: S3ReaderConstructor.sequential(),
    "range_based": lambda: S3ReaderConstructor.range_based(),
}


@pytest.mark.parametrize("reader", list(DCP_READERS))
def test_dcp_save_and_load_model_state_dict(torch_env, s3, bucket, rng, tmp_dir, reader, client_quiet):
    client_quiet.extend(NOT_FOUND_LINES)  # the writer asks whether .metadata exists: HEAD, 404
    source = Model(seed=rng.randrange(2**31))
    state = {"model": source.state_dict(), "epoch": 7, "note": "fjord"}
    path = f"s3://{bucket}/dcp/step-7"

    writer = S3StorageWriter(region=REGION, path=path, s3client_config=client_config(), thread_count=2)
    single_process(lambda: dcp.save(state, storage_writer=writer, no_dist=True))

    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="dcp/step-7/")["Contents"])
    shards = [k for k in keys if k.endswith(".distcp")]
    assert keys == sorted(["dcp/step-7/.metadata"] + shards) and shards, keys  # no .metadata.tmp left
    # The same save through torch's own FileSystemWriter gives the same shard files, byte for byte.
    local = tmp_dir / "dcp"
    single_process(lambda: dcp.save(state, storage_writer=dcp.FileSystemWriter(
        str(local), thread_count=2, sync_files=False), no_dist=True))
    assert sorted(p.name for p in local.glob("*.distcp")) == [k.rsplit("/", 1)[1] for k in shards]
    for key in shards:
        data, etag = stored(s3, bucket, key)
        assert data == (local / key.rsplit("/", 1)[1]).read_bytes(), key
        assert etag.endswith(f"-{expected_parts(len(data))}"), (key, etag)
    assert sum(len(stored(s3, bucket, k)[0]) for k in shards) > 2 * PART_BYTES

    target = Model(seed=rng.randrange(2**31) + 2**31)  # different weights until loaded
    loaded = {"model": target.state_dict(), "epoch": 0, "note": ""}
    storage_reader = S3StorageReader(region=REGION, path=path, s3client_config=client_config(),
                                     reader_constructor=DCP_READERS[reader]())
    single_process(lambda: dcp.load(loaded, storage_reader=storage_reader, no_dist=True))
    target.load_state_dict(loaded["model"])
    assert loaded["epoch"] == 7 and loaded["note"] == "fjord"
    for name, tensor in source.state_dict().items():
        assert tensor.dtype == target.state_dict()[name].dtype
        assert torch.equal(target.state_dict()[name], tensor), name


# ---------------------------------------------------------------------------------------------------
# Copy and delete: what s3torchconnector exposes (S3FileSystem.rename = CopyObject + DeleteObject)
# ---------------------------------------------------------------------------------------------------

def test_filesystem_rename_exists_rm_file(torch_env, s3, bucket, rng, client_quiet):
    client_quiet.extend(NOT_FOUND_LINES)  # exists() on a key that is not there: HEAD, 404
    filesystem = S3FileSystem(region=REGION, s3client_config=client_config())
    data = s3util.payload(rng, 12 * MiB + 9)
    source_key = "src dir/odd key+plus ü%.bin"  # rename percent-encodes each segment of the copy source
    s3.put_object(Bucket=bucket, Key=source_key, Body=data)
    source, target = f"s3://{bucket}/{source_key}", f"s3://{bucket}/renamed/target.bin"
    assert filesystem.exists(source) and not filesystem.exists(target)

    filesystem.rename(source, target)
    assert not filesystem.exists(source) and filesystem.exists(target)
    assert stored(s3, bucket, "renamed/target.bin")[0] == data
    with filesystem.create_stream(target, "rb") as stream:
        assert stream.read() == data

    filesystem.rm_file(target)
    assert not filesystem.exists(target)
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


@pytest.mark.big
@pytest.mark.slow
def test_filesystem_rename_of_1gib_uses_multipart_copy(torch_env, checkpoint, s3, bucket, rng, client_quiet):
    """From 1 GiB on, the CRT copies with UploadPartCopy (x-amz-copy-source-range) instead of CopyObject."""
    client_quiet.extend(NOT_FOUND_LINES)
    size_bytes = 1024 * MiB + 4097
    digest = hashlib.sha256()
    with checkpoint.writer(f"s3://{bucket}/big/source.bin") as writer:
        remaining = size_bytes
        while remaining:
            chunk = s3util.payload(rng, min(PART_BYTES, remaining))
            digest.update(chunk)
            writer.write(chunk)
            remaining -= len(chunk)
    filesystem = S3FileSystem(region=REGION, s3client_config=client_config())
    filesystem.rename(f"s3://{bucket}/big/source.bin", f"s3://{bucket}/big/target.bin")
    assert not filesystem.exists(f"s3://{bucket}/big/source.bin")

    response = s3.get_object(Bucket=bucket, Key="big/target.bin")
    assert response["ContentLength"] == size_bytes
    # UploadPartCopy: a multipart ETag of more than one part (one CopyObject would have given `-1`)
    multipart = re.fullmatch(r"[0-9a-f]{32}-(\d+)", response["ETag"].strip('"'))
    assert multipart and int(multipart[1]) > 1, response["ETag"]
    copied = hashlib.sha256()
    for chunk in response["Body"].iter_chunks(PART_BYTES):
        copied.update(chunk)
    assert copied.hexdigest() == digest.hexdigest()


# ---------------------------------------------------------------------------------------------------
# Over HTTPS
# ---------------------------------------------------------------------------------------------------

def test_checkpoint_and_dcp_over_https(make_server, tmp_dir, rng, monkeypatch, client_quiet):
    """The CRT verifies the server against the trust store OpenSSL's default paths name, which
    SSL_CERT_FILE overrides: the test CA goes there (no client option exists for it)."""
    from tls_ca import CertificateAuthority

    client_quiet.extend(NOT_FOUND_LINES)  # DCP probes for files it has not written yet
    ca = CertificateAuthority(tmp_dir / "ca")
    server = make_server(tls=ca.issue())
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.cert_path))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    monkeypatch.setenv("AWS_REGION", REGION)
    s3 = server.client()
    s3.create_bucket(Bucket="torch-tls")
    over_https = S3Checkpoint(region=REGION, endpoint=server.endpoint, s3client_config=client_config())
    data = rng.randbytes(BIG_BYTES)
    write_through_writer(over_https, "s3://torch-tls/shard", data)
    assert stored(s3, "torch-tls", "shard")[0] == data
    with over_https.reader("s3://torch-tls/shard") as reader:
        assert reader.read() == data
    state = {"weight": torch.arange(1 << 20, dtype=torch.float32)}
    single_process(lambda: dcp.save(state, storage_writer=S3StorageWriter(
        region=REGION, path="s3://torch-tls/dcp", s3client_config=client_config())))
    loaded = {"weight": torch.zeros(1 << 20, dtype=torch.float32)}
    single_process(lambda: dcp.load(loaded, storage_reader=S3StorageReader(
        region=REGION, path="s3://torch-tls/dcp", s3client_config=client_config())))
    assert torch.equal(loaded["weight"], state["weight"])
