"""Real command-line clients: the aws CLI (v1), s3cmd and rclone, on single-PutObject sizes (at or under
5 MiB). Their multipart paths are covered in test_clients_multipart.py."""

import json
import re

import pytest

import s3util
from conftest import empty_and_delete_bucket
from s3util import MiB

pytestmark = pytest.mark.clients

FILE_BYTES = 5 * MiB


def write_file(path, rng, size_bytes) -> str:
    data = s3util.payload(rng, size_bytes)
    path.write_bytes(data)
    return s3util.sha256_hex(data)


COMPLAINTS = ("WARNING", "ERROR", "corrupted", "md5", "checksum", "differ", "Traceback")


def assert_no_complaint(result, words=COMPLAINTS):
    """The tool wrote nothing to stderr that looks like an integrity or protocol complaint. (stdout is
    not searched: the aws CLI's JSON legitimately has ChecksumCRC32 fields.)"""
    text = result.stderr_text
    for word in words:
        assert word.lower() not in text.lower(), f"{word!r} in stderr of {result.args}:\n{text}"


# ---------------------------------------------------------------------------------------------------
# aws CLI
# ---------------------------------------------------------------------------------------------------

def test_aws_cli_high_level_commands(aws_cli, s3, bucket_name, tmp_dir, rng):
    source = tmp_dir / "source.bin"
    expected = write_file(source, rng, FILE_BYTES)
    target = f"s3://{bucket_name}"
    try:
        assert_no_complaint(aws_cli("s3", "mb", target))
        assert bucket_name in aws_cli("s3", "ls").stdout_text

        upload = aws_cli("s3", "cp", source, f"{target}/dir/source.bin", "--only-show-errors")
        assert_no_complaint(upload)
        download = aws_cli("s3", "cp", f"{target}/dir/source.bin", tmp_dir / "back.bin",
                           "--only-show-errors")
        assert_no_complaint(download)
        assert s3util.file_sha256_hex(tmp_dir / "back.bin") == expected

        top = aws_cli("s3", "ls", f"{target}/").stdout_text
        assert re.search(r"^\s*PRE dir/$", top, re.M), top
        inner = aws_cli("s3", "ls", f"{target}/dir/").stdout_text
        assert re.search(rf"\s{FILE_BYTES} source\.bin$", inner, re.M), inner

        assert_no_complaint(aws_cli("s3", "rm", f"{target}/dir/source.bin"))
        assert s3.list_objects_v2(Bucket=bucket_name)["KeyCount"] == 0
        assert_no_complaint(aws_cli("s3", "rb", target))
        assert bucket_name not in {b["Name"] for b in s3.list_buckets()["Buckets"]}
    finally:
        empty_and_delete_bucket(s3, bucket_name)


def test_aws_cli_s3api_commands(aws_cli, bucket, tmp_dir, rng):
    source = tmp_dir / "api.bin"
    expected = write_file(source, rng, 1 * MiB + 17)
    put = aws_cli("s3api", "put-object", "--bucket", bucket, "--key", "api/obj.bin", "--body", source,
                  "--content-type", "application/x-api-test", "--metadata", "owner=fjord,kind=test",
                  "--output", "json")
    assert_no_complaint(put)
    etag = json.loads(put.stdout_text)["ETag"]

    head = json.loads(aws_cli("s3api", "head-object", "--bucket", bucket, "--key", "api/obj.bin",
                              "--output", "json").stdout_text)
    assert head["ContentLength"] == 1 * MiB + 17
    assert head["ETag"] == etag
    assert head["ContentType"] == "application/x-api-test"
    assert head["Metadata"] == {"owner": "fjord", "kind": "test"}

    got = aws_cli("s3api", "get-object", "--bucket", bucket, "--key", "api/obj.bin",
                  tmp_dir / "api-back.bin", "--output", "json")
    assert_no_complaint(got)
    assert json.loads(got.stdout_text)["ETag"] == etag
    assert s3util.file_sha256_hex(tmp_dir / "api-back.bin") == expected

    listed = json.loads(aws_cli("s3api", "list-objects-v2", "--bucket", bucket, "--prefix", "api/",
                                "--output", "json").stdout_text)
    assert [item["Key"] for item in listed["Contents"]] == ["api/obj.bin"]
    assert listed["Contents"][0]["Size"] == 1 * MiB + 17

    assert_no_complaint(aws_cli("s3api", "delete-object", "--bucket", bucket, "--key", "api/obj.bin"))
    missing = aws_cli("s3api", "head-object", "--bucket", bucket, "--key", "api/obj.bin", check=False)
    assert missing.returncode != 0 and "404" in missing.stderr_text, missing.stderr_text


# ---------------------------------------------------------------------------------------------------
# s3cmd: it compares the PUT response's ETag with its own MD5 unless the ETag contains '-', and on
# download compares with the md5 in x-amz-meta-s3cmd-attrs (or the ETag when that is absent).
# ---------------------------------------------------------------------------------------------------

def test_s3cmd_round_trip(s3cmd, s3, bucket_name, tmp_dir, rng):
    source = tmp_dir / "s3cmd.bin"
    expected = write_file(source, rng, FILE_BYTES)
    small = tmp_dir / "small.txt"
    small.write_bytes(b"small file\n")
    target = f"s3://{bucket_name}"
    try:
        assert_no_complaint(s3cmd("mb", target))
        assert target in s3cmd("ls").stdout_text

        assert_no_complaint(s3cmd("put", source, f"{target}/dir/s3cmd.bin"))
        assert_no_complaint(s3cmd("put", small, f"{target}/small.txt"))
        assert_no_complaint(s3cmd("get", "--force", f"{target}/dir/s3cmd.bin", tmp_dir / "back.bin"))
        assert s3util.file_sha256_hex(tmp_dir / "back.bin") == expected
        assert_no_complaint(s3cmd("get", "--force", f"{target}/small.txt", tmp_dir / "small-back.txt"))
        assert (tmp_dir / "small-back.txt").read_bytes() == b"small file\n"

        top = s3cmd("ls", f"{target}/").stdout_text
        assert re.search(rf"DIR\s+{re.escape(target)}/dir/$", top, re.M), top
        assert f"{target}/small.txt" in top
        recursive = s3cmd("ls", "--recursive", target).stdout_text
        assert re.search(rf"\s{FILE_BYTES}\s+.*{re.escape(target)}/dir/s3cmd\.bin$", recursive, re.M), recursive

        assert_no_complaint(s3cmd("del", f"{target}/dir/s3cmd.bin"))
        assert_no_complaint(s3cmd("del", f"{target}/small.txt"))
        assert s3.list_objects_v2(Bucket=bucket_name)["KeyCount"] == 0
        assert_no_complaint(s3cmd("rb", target))
        assert bucket_name not in {b["Name"] for b in s3.list_buckets()["Buckets"]}
    finally:
        empty_and_delete_bucket(s3, bucket_name)


def test_s3cmd_get_of_object_uploaded_without_md5(s3cmd, s3, bucket, tmp_dir, rng):
    """An object PUT by boto3 (no Content-MD5, so Fjord's default ETag): s3cmd must not take that ETag
    for an MD5 and complain."""
    data = s3util.payload(rng, 300_000)
    s3.put_object(Bucket=bucket, Key="from-boto3.bin", Body=data)
    result = s3cmd("get", "--force", f"s3://{bucket}/from-boto3.bin", tmp_dir / "out.bin")
    assert_no_complaint(result)
    assert (tmp_dir / "out.bin").read_bytes() == data


# ---------------------------------------------------------------------------------------------------
# rclone: sends Content-MD5 on single-part uploads, and treats an ETag matching ^[0-9a-f]{32}$ as the
# object's MD5 (comparing it after uploads and downloads).
# ---------------------------------------------------------------------------------------------------

def test_rclone_round_trip(rclone, s3, bucket_name, tmp_dir, rng):
    local = tmp_dir / "local"
    local.mkdir()
    expected = write_file(local / "rclone.bin", rng, FILE_BYTES)
    (local / "note.txt").write_bytes(b"hello rclone\n")
    remote = f"fjord:{bucket_name}"
    try:
        assert_no_complaint(rclone("mkdir", remote))
        assert_no_complaint(rclone("copyto", local / "rclone.bin", f"{remote}/dir/rclone.bin"))
        assert_no_complaint(rclone("copyto", local / "note.txt", f"{remote}/dir/note.txt"))
        assert_no_complaint(rclone("copyto", f"{remote}/dir/rclone.bin", tmp_dir / "back.bin"))
        assert s3util.file_sha256_hex(tmp_dir / "back.bin") == expected

        listing = rclone("ls", remote).stdout_text
        assert re.search(rf"^\s*{FILE_BYTES} dir/rclone\.bin$", listing, re.M), listing
        assert re.search(r"^\s*13 dir/note\.txt$", listing, re.M), listing
        assert rclone("lsf", remote).stdout_text.split() == ["dir/"]
        assert sorted(rclone("lsf", "-R", remote).stdout_text.split()) == [
            "dir/", "dir/note.txt", "dir/rclone.bin"]

        by_content = rclone("check", local, f"{remote}/dir", "--download")
        assert "0 differences found" in by_content.stderr_text, by_content.stderr_text
        assert_no_complaint(by_content, ("ERROR", "corrupted"))
        # Uploaded with Content-MD5, so the ETag is that MD5 and rclone can check by hash too.
        by_hash = rclone("check", local, f"{remote}/dir")
        assert "0 differences found" in by_hash.stderr_text, by_hash.stderr_text
        assert "hashes could not be checked" not in by_hash.stderr_text, by_hash.stderr_text
        assert_no_complaint(by_hash, ("ERROR", "corrupted"))

        assert_no_complaint(rclone("deletefile", f"{remote}/dir/note.txt"))
        assert_no_complaint(rclone("delete", remote))
        assert s3.list_objects_v2(Bucket=bucket_name)["KeyCount"] == 0
        assert_no_complaint(rclone("rmdir", remote))
        assert bucket_name not in {b["Name"] for b in s3.list_buckets()["Buckets"]}
    finally:
        empty_and_delete_bucket(s3, bucket_name)


def test_rclone_download_of_object_uploaded_without_md5(rclone, s3, bucket, tmp_dir, rng):
    """An object PUT by boto3 (default ETag): rclone must not read that ETag as an MD5 and then call
    the download corrupted."""
    data = s3util.payload(rng, 300_000)
    s3.put_object(Bucket=bucket, Key="from-boto3.bin", Body=data)
    result = rclone("copyto", f"fjord:{bucket}/from-boto3.bin", tmp_dir / "out.bin")
    assert_no_complaint(result)
    assert (tmp_dir / "out.bin").read_bytes() == data


def test_aws_cli_download_of_object_uploaded_by_rclone(rclone, aws_cli, bucket, tmp_dir, rng):
    source = tmp_dir / "cross.bin"
    expected = write_file(source, rng, 2 * MiB)
    assert_no_complaint(rclone("copyto", source, f"fjord:{bucket}/cross.bin"))
    assert_no_complaint(aws_cli("s3", "cp", f"s3://{bucket}/cross.bin", tmp_dir / "cross-back.bin",
                                "--only-show-errors"))
    assert s3util.file_sha256_hex(tmp_dir / "cross-back.bin") == expected
