"""Real clients against multipart upload, server-side copy, batch delete, tagging and attributes:
the aws CLI (`s3` and `s3api`), s3cmd, rclone, minio-py and s3dlio. Every transfer is checked
byte-exact with a local SHA-256, and no client may print a warning or an integrity complaint."""

import io
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import s3util
from conftest import REGION, ToolRunner, _scrub_environment
from multipart_support import composite_checksum, multipart_etag
from s3util import GiB, KiB, MiB
from test_big import write_random_file
from test_clients import assert_no_complaint, write_file

pytestmark = pytest.mark.clients

AWS_MULTIPART_CONFIG = "[default]\ns3 =\n  multipart_chunksize = 8MB\n  multipart_threshold = 8MB\n"


@pytest.fixture
def aws_multipart(aws_cli, tmp_dir):
    """The aws CLI with an AWS config file that sets 8 MiB multipart chunks and threshold."""
    config = tmp_dir / "aws-multipart-config"
    config.write_text(AWS_MULTIPART_CONFIG)
    env = dict(aws_cli.env, AWS_CONFIG_FILE=str(config))
    return ToolRunner(aws_cli.argv_prefix, env, tmp_dir)


def api_json(runner, *args) -> dict:
    result = runner("s3api", *args, "--output", "json")
    assert_no_complaint(result)
    return json.loads(result.stdout_text) if result.stdout_text.strip() else {}


# ---------------------------------------------------------------------------------------------------
# aws CLI
# ---------------------------------------------------------------------------------------------------

@pytest.mark.big
@pytest.mark.slow
def test_aws_cli_one_gib_multipart_copy(aws_multipart, s3, bucket, tmp_dir, rng):
    source = tmp_dir / "big.bin"
    expected = write_random_file(source, rng, GiB)
    try:
        assert_no_complaint(aws_multipart("s3", "cp", source, f"s3://{bucket}/big.bin",
                                          "--only-show-errors"))
        source.unlink()
        head = s3.head_object(Bucket=bucket, Key="big.bin")
        assert head["ContentLength"] == GiB
        assert head["ETag"].endswith('-128"'), head["ETag"]
        back = tmp_dir / "back.bin"
        assert_no_complaint(aws_multipart("s3", "cp", f"s3://{bucket}/big.bin", back,
                                          "--only-show-errors"))
        assert s3util.file_sha256_hex(back) == expected
    finally:
        source.unlink(missing_ok=True)
        (tmp_dir / "back.bin").unlink(missing_ok=True)
        s3.delete_object(Bucket=bucket, Key="big.bin")


def test_aws_cli_s3_multipart_copy_and_recursive_delete(aws_multipart, s3, bucket, tmp_dir, rng):
    """20 MiB with 8 MiB chunks: a 3-part upload, a server-side copy done with UploadPartCopy, and
    `s3 rm --recursive`, which deletes with DeleteObjects."""
    source = tmp_dir / "twenty.bin"
    expected = write_file(source, rng, 20 * MiB + 5)
    target = f"s3://{bucket}"
    assert_no_complaint(aws_multipart("s3", "cp", source, f"{target}/dir/twenty.bin", "--only-show-errors"))
    assert s3.head_object(Bucket=bucket, Key="dir/twenty.bin")["ETag"].endswith('-3"')
    assert_no_complaint(aws_multipart("s3", "cp", f"{target}/dir/twenty.bin", f"{target}/dir/copy.bin",
                                      "--only-show-errors"))
    assert_no_complaint(aws_multipart("s3", "cp", f"{target}/dir/copy.bin", tmp_dir / "copy-back.bin",
                                      "--only-show-errors"))
    assert s3util.file_sha256_hex(tmp_dir / "copy-back.bin") == expected
    small = tmp_dir / "small.txt"
    small.write_bytes(b"small\n")
    for n in range(3):
        assert_no_complaint(aws_multipart("s3", "cp", small, f"{target}/dir/small-{n}.txt",
                                          "--only-show-errors"))
    assert len(s3.list_objects_v2(Bucket=bucket)["Contents"]) == 5
    assert_no_complaint(aws_multipart("s3", "rm", "--recursive", f"{target}/dir/", "--only-show-errors"))
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_aws_cli_s3api_multipart_lifecycle(aws_cli, s3, bucket, tmp_dir, rng):
    parts = [s3util.payload(rng, 5 * MiB + 3), s3util.payload(rng, 700 * KiB)]
    paths = []
    for number, data in enumerate(parts, start=1):
        path = tmp_dir / f"part{number}.bin"
        path.write_bytes(data)
        paths.append(path)
    created = api_json(aws_cli, "create-multipart-upload", "--bucket", bucket, "--key", "api/mp.bin",
                       "--checksum-algorithm", "CRC32", "--content-type", "application/x-mp",
                       "--metadata", "via=s3api")
    upload_id = created["UploadId"]
    listed = []
    for number, path in enumerate(paths, start=1):
        part = api_json(aws_cli, "upload-part", "--bucket", bucket, "--key", "api/mp.bin",
                        "--upload-id", upload_id, "--part-number", str(number), "--body", path,
                        "--checksum-algorithm", "CRC32")
        assert part["ChecksumCRC32"] == s3util.CHECKSUM_VALUE["crc32"](parts[number - 1])
        listed.append({"PartNumber": number, "ETag": part["ETag"], "ChecksumCRC32": part["ChecksumCRC32"]})
    in_list = api_json(aws_cli, "list-parts", "--bucket", bucket, "--key", "api/mp.bin",
                       "--upload-id", upload_id)
    assert [(p["PartNumber"], p["Size"]) for p in in_list["Parts"]] == [
        (1, len(parts[0])), (2, len(parts[1]))]
    uploads = api_json(aws_cli, "list-multipart-uploads", "--bucket", bucket)
    assert [u["UploadId"] for u in uploads["Uploads"]] == [upload_id]

    manifest = tmp_dir / "parts.json"
    manifest.write_text(json.dumps({"Parts": listed}))
    done = api_json(aws_cli, "complete-multipart-upload", "--bucket", bucket, "--key", "api/mp.bin",
                    "--upload-id", upload_id, "--multipart-upload", f"file://{manifest}")
    assert done["ETag"] == multipart_etag([p["ETag"] for p in listed])
    assert done["ChecksumCRC32"] == composite_checksum("crc32", parts)
    head = api_json(aws_cli, "head-object", "--bucket", bucket, "--key", "api/mp.bin",
                    "--checksum-mode", "ENABLED")
    assert head["ContentLength"] == sum(map(len, parts)) and head["ContentType"] == "application/x-mp"
    assert head["Metadata"] == {"via": "s3api"}
    assert head["ChecksumCRC32"] == composite_checksum("crc32", parts)
    got = api_json(aws_cli, "get-object", "--bucket", bucket, "--key", "api/mp.bin", tmp_dir / "whole.bin")
    assert got["ETag"] == done["ETag"]
    assert (tmp_dir / "whole.bin").read_bytes() == b"".join(parts)

    # Conditional writes and deletes: a second upload may not replace the object under If-None-Match.
    again = api_json(aws_cli, "create-multipart-upload", "--bucket", bucket, "--key", "api/mp.bin")
    part = api_json(aws_cli, "upload-part", "--bucket", bucket, "--key", "api/mp.bin", "--upload-id",
                    again["UploadId"], "--part-number", "1", "--body", paths[1])
    manifest.write_text(json.dumps({"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}))
    refused = aws_cli("s3api", "complete-multipart-upload", "--bucket", bucket, "--key", "api/mp.bin",
                      "--upload-id", again["UploadId"], "--multipart-upload", f"file://{manifest}",
                      "--if-none-match", "*", check=False)
    assert refused.returncode != 0 and "PreconditionFailed" in refused.stderr_text, refused.stderr_text
    refused = aws_cli("s3api", "delete-object", "--bucket", bucket, "--key", "api/mp.bin", "--if-match",
                      '"0123456789abcdef0123456789abcdef-2"', check=False)
    assert refused.returncode != 0 and "PreconditionFailed" in refused.stderr_text, refused.stderr_text
    assert s3.head_object(Bucket=bucket, Key="api/mp.bin")["ETag"] == done["ETag"]
    aws_cli("s3api", "abort-multipart-upload", "--bucket", bucket, "--key", "api/mp.bin",
            "--upload-id", again["UploadId"])
    aws_cli("s3api", "delete-object", "--bucket", bucket, "--key", "api/mp.bin", "--if-match", done["ETag"])
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0

    aborted = api_json(aws_cli, "create-multipart-upload", "--bucket", bucket, "--key", "api/gone.bin")
    aws_cli("s3api", "abort-multipart-upload", "--bucket", bucket, "--key", "api/gone.bin",
            "--upload-id", aborted["UploadId"])
    assert "Uploads" not in api_json(aws_cli, "list-multipart-uploads", "--bucket", bucket)


def test_aws_cli_s3api_copy_parts_tagging_attributes_batch_delete(aws_cli, s3, bucket, tmp_dir, rng):
    parts = [s3util.payload(rng, 5 * MiB), s3util.payload(rng, 1000)]
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="src.bin")["UploadId"]
    etags = [s3.upload_part(Bucket=bucket, Key="src.bin", UploadId=upload_id, PartNumber=n, Body=d)["ETag"]
             for n, d in enumerate(parts, start=1)]
    s3.complete_multipart_upload(Bucket=bucket, Key="src.bin", UploadId=upload_id, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]})
    whole = b"".join(parts)

    # GetObject / HeadObject by part number.
    second = api_json(aws_cli, "get-object", "--bucket", bucket, "--key", "src.bin", "--part-number", "2",
                      tmp_dir / "part2.bin")
    assert second["PartsCount"] == 2 and second["ContentLength"] == 1000
    assert (tmp_dir / "part2.bin").read_bytes() == parts[1]
    head = api_json(aws_cli, "head-object", "--bucket", bucket, "--key", "src.bin", "--part-number", "1")
    assert head["PartsCount"] == 2 and head["ContentLength"] == 5 * MiB

    # CopyObject with REPLACE, then UploadPartCopy of a range.
    api_json(aws_cli, "copy-object", "--bucket", bucket, "--key", "copy.bin", "--copy-source",
             f"{bucket}/src.bin", "--metadata-directive", "REPLACE", "--metadata", "copied=yes",
             "--content-type", "text/x-copy")
    copy_head = s3.head_object(Bucket=bucket, Key="copy.bin")
    assert copy_head["Metadata"] == {"copied": "yes"} and copy_head["ContentType"] == "text/x-copy"
    assert s3.get_object(Bucket=bucket, Key="copy.bin")["Body"].read() == whole
    ranged_id = api_json(aws_cli, "create-multipart-upload", "--bucket", bucket,
                         "--key", "ranged.bin")["UploadId"]
    part = api_json(aws_cli, "upload-part-copy", "--bucket", bucket, "--key", "ranged.bin", "--upload-id",
                    ranged_id, "--part-number", "1", "--copy-source", f"{bucket}/src.bin",
                    "--copy-source-range", f"bytes={5 * MiB - 10}-{5 * MiB + 9}")
    s3.complete_multipart_upload(Bucket=bucket, Key="ranged.bin", UploadId=ranged_id, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]})
    assert s3.get_object(Bucket=bucket, Key="ranged.bin")["Body"].read() == whole[5 * MiB - 10:5 * MiB + 10]

    # Tagging.
    aws_cli("s3api", "put-object-tagging", "--bucket", bucket, "--key", "copy.bin", "--tagging",
            json.dumps({"TagSet": [{"Key": "tier", "Value": "gold"}]}))
    tags = api_json(aws_cli, "get-object-tagging", "--bucket", bucket, "--key", "copy.bin")
    assert tags["TagSet"] == [{"Key": "tier", "Value": "gold"}]
    aws_cli("s3api", "delete-object-tagging", "--bucket", bucket, "--key", "copy.bin")
    assert api_json(aws_cli, "get-object-tagging", "--bucket", bucket, "--key", "copy.bin")["TagSet"] == []

    # GetObjectAttributes.
    attributes = api_json(aws_cli, "get-object-attributes", "--bucket", bucket, "--key", "src.bin",
                          "--object-attributes", "ETag", "ObjectSize", "ObjectParts")
    assert attributes["ObjectSize"] == len(whole)
    assert attributes["ETag"] == multipart_etag(etags).strip('"')
    assert attributes["ObjectParts"]["TotalPartsCount"] == 2

    # DeleteObjects.
    deleted = api_json(aws_cli, "delete-objects", "--bucket", bucket, "--delete", json.dumps(
        {"Objects": [{"Key": k} for k in ["src.bin", "copy.bin", "ranged.bin", "never-was"]]}))
    assert sorted(d["Key"] for d in deleted["Deleted"]) == ["copy.bin", "never-was", "ranged.bin", "src.bin"]
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


# ---------------------------------------------------------------------------------------------------
# s3cmd
# ---------------------------------------------------------------------------------------------------

def test_s3cmd_multipart_put_copy_info_delete(s3cmd, s3, bucket, tmp_dir, rng):
    source = tmp_dir / "s3cmd-mp.bin"
    size_bytes = 16 * MiB + 1234
    expected = write_file(source, rng, size_bytes)
    target = f"s3://{bucket}"
    assert_no_complaint(s3cmd("put", "--multipart-chunk-size-mb=5", source, f"{target}/mp.bin"))
    head = s3.head_object(Bucket=bucket, Key="mp.bin")
    assert head["ContentLength"] == size_bytes and head["ETag"].endswith('-4"'), head["ETag"]
    assert_no_complaint(s3cmd("get", "--force", f"{target}/mp.bin", tmp_dir / "back.bin"))
    assert s3util.file_sha256_hex(tmp_dir / "back.bin") == expected

    assert_no_complaint(s3cmd("cp", f"{target}/mp.bin", f"{target}/copy.bin"))
    assert_no_complaint(s3cmd("get", "--force", f"{target}/copy.bin", tmp_dir / "copy.bin"))
    assert s3util.file_sha256_hex(tmp_dir / "copy.bin") == expected
    info = s3cmd("info", f"{target}/copy.bin")
    assert_no_complaint(info)
    assert str(size_bytes) in info.stdout_text, info.stdout_text
    assert s3util.file_sha256_hex(source) == expected

    small = tmp_dir / "small.txt"
    small.write_bytes(b"s3cmd small\n")
    for n in range(3):
        assert_no_complaint(s3cmd("put", small, f"{target}/many/{n}.txt"))
    assert_no_complaint(s3cmd("del", f"{target}/mp.bin", f"{target}/copy.bin", f"{target}/many/0.txt"))
    assert sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]) == [
        "many/1.txt", "many/2.txt"]
    assert_no_complaint(s3cmd("del", "--recursive", f"{target}/many/"))
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


# ---------------------------------------------------------------------------------------------------
# rclone
# ---------------------------------------------------------------------------------------------------

def test_rclone_multipart_copy_server_side_copy_delete(rclone, s3, bucket, tmp_dir, rng):
    local = tmp_dir / "local"
    local.mkdir()
    expected = write_file(local / "thirty.bin", rng, 30 * MiB)
    remote = f"fjord:{bucket}"
    chunking = ["--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M"]
    assert_no_complaint(rclone("copy", *chunking, local, f"{remote}/up"))
    head = s3.head_object(Bucket=bucket, Key="up/thirty.bin")
    assert head["ContentLength"] == 30 * MiB and head["ETag"].endswith('-6"'), head["ETag"]

    assert_no_complaint(rclone("copyto", f"{remote}/up/thirty.bin", f"{remote}/copied/thirty.bin"))
    assert_no_complaint(rclone("copyto", f"{remote}/copied/thirty.bin", tmp_dir / "back.bin"))
    assert s3util.file_sha256_hex(tmp_dir / "back.bin") == expected
    for directory in ("up", "copied"):
        checked = rclone("check", local, f"{remote}/{directory}", "--download")
        assert "0 differences found" in checked.stderr_text, checked.stderr_text
        assert_no_complaint(checked, ("ERROR", "corrupted"))

    assert_no_complaint(rclone("delete", remote))
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


# ---------------------------------------------------------------------------------------------------
# minio-py
# ---------------------------------------------------------------------------------------------------

@pytest.fixture
def minio_client(fjord_server):
    minio = pytest.importorskip("minio")
    return minio.Minio(fjord_server.host, access_key=fjord_server.access_key,
                       secret_key=fjord_server.secret_key, secure=False, region=REGION)


def test_minio_multipart_copy_stat_remove(minio_client, s3, bucket, tmp_dir, rng):
    from minio.commonconfig import CopySource
    from minio.deleteobjects import DeleteObject

    source = tmp_dir / "minio.bin"
    size_bytes = 12 * MiB + 77
    expected = write_file(source, rng, size_bytes)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = minio_client.fput_object(bucket, "mp/minio.bin", str(source), part_size=5 * MiB,
                                          metadata={"x-amz-meta-origin": "minio"})
        assert result.etag.endswith("-3"), result.etag
        stat = minio_client.stat_object(bucket, "mp/minio.bin")
        assert stat.size == size_bytes and stat.etag == result.etag
        assert stat.metadata.get("x-amz-meta-origin") == "minio"
        minio_client.fget_object(bucket, "mp/minio.bin", str(tmp_dir / "back.bin"))
        assert s3util.file_sha256_hex(tmp_dir / "back.bin") == expected
        ranged = minio_client.get_object(bucket, "mp/minio.bin", offset=5 * MiB - 4, length=8)
        try:
            assert ranged.read() == source.read_bytes()[5 * MiB - 4:5 * MiB + 4]
        finally:
            ranged.close()
            ranged.release_conn()

        copied = minio_client.copy_object(bucket, "copy/minio.bin", CopySource(bucket, "mp/minio.bin"))
        assert copied.object_name == "copy/minio.bin"
        assert minio_client.stat_object(bucket, "copy/minio.bin").size == size_bytes
        minio_client.fget_object(bucket, "copy/minio.bin", str(tmp_dir / "copy.bin"))
        assert s3util.file_sha256_hex(tmp_dir / "copy.bin") == expected

        for n in range(5):
            minio_client.put_object(bucket, f"small/{n}", io.BytesIO(b"x" * n), n)
        names = [o.object_name for o in minio_client.list_objects(bucket, recursive=True)]
        assert len(names) == 7
        errors = list(minio_client.remove_objects(bucket, [DeleteObject(n) for n in names]))
        assert errors == []
        assert list(minio_client.list_objects(bucket, recursive=True)) == []
    assert [str(w.message) for w in caught] == []


# ---------------------------------------------------------------------------------------------------
# s3dlio (a Rust library on the AWS SDK for Rust; its S3 client is a process-wide singleton, so it
# runs in a child process with its documented environment variables)
# ---------------------------------------------------------------------------------------------------

S3DLIO_SCRIPT = textwrap.dedent("""
    import hashlib, json, sys
    import s3dlio
    bucket, source = sys.argv[1], sys.argv[2]
    data = open(source, "rb").read()
    report = {}
    s3dlio.put_bytes(f"s3://{bucket}/dlio/small.bin", b"hello s3dlio")
    report["small"] = bytes(s3dlio.get(f"s3://{bucket}/dlio/small.bin")).decode()
    writer = s3dlio.MultipartUploadWriter.from_uri(f"s3://{bucket}/dlio/mp.bin",
                                                   part_size=5 * 1024 * 1024)
    writer.write(data)
    closed = writer.close()
    report["close"] = {"etag": closed["etag"], "parts": closed["parts"],
                       "total_bytes": closed["total_bytes"]}
    report["get_sha256"] = hashlib.sha256(bytes(s3dlio.get(f"s3://{bucket}/dlio/mp.bin"))).hexdigest()
    first = 5 * 1024 * 1024 - 6
    ranged = bytes(s3dlio.get_range(f"s3://{bucket}/dlio/mp.bin", first, 12))
    report["range_ok"] = ranged == data[first:first + 12]
    report["stat_size"] = s3dlio.stat(f"s3://{bucket}/dlio/mp.bin")["size"]
    report["listed"] = sorted(s3dlio.list(f"s3://{bucket}/dlio/", recursive=True))
    s3dlio.delete(f"s3://{bucket}/dlio/small.bin")
    s3dlio.delete(f"s3://{bucket}/dlio/", recursive=True)
    report["listed_after_delete"] = s3dlio.list(f"s3://{bucket}/dlio/", recursive=True)
    print(json.dumps(report))
""")


def test_s3dlio_multipart_get_range_stat_delete(fjord_server, s3, bucket, tmp_dir, rng):
    pytest.importorskip("s3dlio")
    source = tmp_dir / "dlio.bin"
    size_bytes = 12 * MiB + 7
    expected = write_file(source, rng, size_bytes)
    env = _scrub_environment(dict(os.environ))
    env.update({"AWS_ENDPOINT_URL": fjord_server.endpoint, "AWS_ACCESS_KEY_ID": fjord_server.access_key,
                "AWS_SECRET_ACCESS_KEY": fjord_server.secret_key, "AWS_REGION": REGION,
                "AWS_DEFAULT_REGION": REGION, "HOME": str(tmp_dir)})
    result = subprocess.run([sys.executable, "-c", S3DLIO_SCRIPT, bucket, str(source)], env=env,
                            cwd=tmp_dir, capture_output=True, timeout=180, stdin=subprocess.DEVNULL)
    stderr = result.stderr.decode(errors="replace")
    stdout = result.stdout.decode(errors="replace")
    assert result.returncode == 0, f"s3dlio script failed:\n{stderr}\n{stdout}"
    report = json.loads(result.stdout.decode().strip().splitlines()[-1])
    assert report["small"] == "hello s3dlio"
    assert report["close"]["parts"] == 3 and report["close"]["total_bytes"] == size_bytes
    assert report["close"]["etag"].strip('"').endswith("-3")
    assert report["get_sha256"] == expected
    assert report["range_ok"]
    assert report["stat_size"] == size_bytes
    assert report["listed"] == [f"s3://{bucket}/dlio/mp.bin", f"s3://{bucket}/dlio/small.bin"]
    assert report["listed_after_delete"] == []
    for word in ("WARN", "ERROR", "panicked", "Traceback"):
        assert word not in stderr, stderr
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
