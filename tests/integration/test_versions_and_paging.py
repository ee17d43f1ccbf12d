"""The version interface of a bucket that never had versioning, bucket paging, and deleting a bucket that
holds only unfinished uploads: what cleanup routines, audit tools and SDK paginators call.

In a bucket where versioning was never enabled each key has one version, the one S3 calls "null"
(docs/s3-compatibility.md); these tests check that every call naming versions answers as S3 does there.
Buckets with versioning enabled are test_versioning.py's.
"""
import json

import pytest
import requests
from botocore.exceptions import ClientError
from minio import Minio

import s3util
from conftest import empty_and_delete_bucket, unique_bucket_name


def error_of(excinfo) -> tuple[int, str]:
    err = excinfo.value.response
    return err["ResponseMetadata"]["HTTPStatusCode"], err["Error"]["Code"]


def put_keys(s3, bucket, keys):
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())


# ---- ListObjectVersions ----

def test_list_object_versions_lists_each_key_as_its_null_version(s3, bucket):
    put_keys(s3, bucket, ["a", "b/1", "b/2", "c"])
    listed = s3.list_object_versions(Bucket=bucket)
    versions = listed["Versions"]
    assert [v["Key"] for v in versions] == ["a", "b/1", "b/2", "c"]
    assert all(v["VersionId"] == "null" and v["IsLatest"] for v in versions)
    heads = {k: s3.head_object(Bucket=bucket, Key=k) for k in ["a", "c"]}
    for v in versions:
        if v["Key"] in heads:
            assert v["ETag"] == heads[v["Key"]]["ETag"]
            assert v["Size"] == heads[v["Key"]]["ContentLength"]
    assert "DeleteMarkers" not in listed and listed["IsTruncated"] is False

    grouped = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [v["Key"] for v in grouped["Versions"]] == ["a", "c"]
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["b/"]
    assert [v["Key"] for v in s3.list_object_versions(Bucket=bucket, Prefix="b/")["Versions"]] == ["b/1", "b/2"]


def test_list_object_versions_pages_with_key_and_version_markers(s3, bucket):
    keys = [f"k{i:02d}" for i in range(7)]
    put_keys(s3, bucket, keys)
    first = s3.list_object_versions(Bucket=bucket, MaxKeys=3)
    assert first["IsTruncated"] is True
    assert (first["NextKeyMarker"], first["NextVersionIdMarker"]) == ("k02", "null")
    second = s3.list_object_versions(Bucket=bucket, MaxKeys=3, KeyMarker=first["NextKeyMarker"],
                                     VersionIdMarker=first["NextVersionIdMarker"])
    assert [v["Key"] for v in second["Versions"]] == ["k03", "k04", "k05"]
    assert second["KeyMarker"] == "k02" and second["VersionIdMarker"] == "null"
    # A key marker alone resumes after that key too.
    assert [v["Key"] for v in s3.list_object_versions(Bucket=bucket, KeyMarker="k04")["Versions"]] == ["k05", "k06"]
    paged = [v["Key"] for page in s3.get_paginator("list_object_versions").paginate(
        Bucket=bucket, PaginationConfig={"PageSize": 2}) for v in page.get("Versions", [])]
    assert paged == keys


def test_list_object_versions_refuses_what_s3_refuses(s3, bucket):
    put_keys(s3, bucket, ["a"])
    with pytest.raises(ClientError) as alone:
        s3.list_object_versions(Bucket=bucket, VersionIdMarker="null")
    assert error_of(alone) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as unknown:
        s3.list_object_versions(Bucket=bucket, KeyMarker="a", VersionIdMarker="3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY")
    assert error_of(unknown) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as missing:
        s3.list_object_versions(Bucket=unique_bucket_name("nosuch"))
    assert error_of(missing) == (404, "NoSuchBucket")


def test_get_bucket_versioning_of_a_bucket_never_versioned(s3, bucket):
    answer = s3.get_bucket_versioning(Bucket=bucket)
    assert "Status" not in answer and "MFADelete" not in answer
    with pytest.raises(ClientError) as missing:
        s3.get_bucket_versioning(Bucket=unique_bucket_name("nosuch"))
    assert error_of(missing) == (404, "NoSuchBucket")


def test_the_null_version_id_names_the_object_and_no_other_id_does(s3, bucket):
    s3.put_object(Bucket=bucket, Key="obj", Body=b"payload")
    assert s3.get_object(Bucket=bucket, Key="obj", VersionId="null")["Body"].read() == b"payload"
    assert s3.head_object(Bucket=bucket, Key="obj", VersionId="null")["ContentLength"] == 7
    s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "obj", "VersionId": "null"})
    assert s3.get_object(Bucket=bucket, Key="copy")["Body"].read() == b"payload"
    for call in (lambda: s3.get_object(Bucket=bucket, Key="obj", VersionId="abc"),
                 lambda: s3.head_object(Bucket=bucket, Key="obj", VersionId="abc"),
                 lambda: s3.delete_object(Bucket=bucket, Key="obj", VersionId="abc"),
                 lambda: s3.copy_object(Bucket=bucket, Key="copy2",
                                        CopySource={"Bucket": bucket, "Key": "obj", "VersionId": "abc"})):
        with pytest.raises(ClientError) as refused:
            call()
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert s3.get_object(Bucket=bucket, Key="obj")["Body"].read() == b"payload"  # nothing was deleted
    s3.delete_object(Bucket=bucket, Key="obj", VersionId="null")
    with pytest.raises(ClientError) as gone:
        s3.head_object(Bucket=bucket, Key="obj")
    assert gone.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_delete_objects_by_null_version_as_cleanup_harnesses_do(s3, bucket_name):
    """The cleanup every S3 test harness runs: list versions, delete them by id, delete the bucket."""
    s3.create_bucket(Bucket=bucket_name)
    put_keys(s3, bucket_name, [f"x/{i}" for i in range(5)] + ["  "])
    listed = s3.list_object_versions(Bucket=bucket_name)["Versions"]
    objects = [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in listed]
    objects.append({"Key": "x/0", "VersionId": "not-a-version"})
    answer = s3.delete_objects(Bucket=bucket_name, Delete={"Objects": objects})
    assert sorted((d["Key"], d["VersionId"]) for d in answer["Deleted"]) == sorted(
        (v["Key"], "null") for v in listed)
    assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [("x/0", "InvalidArgument")]
    assert "Versions" not in s3.list_object_versions(Bucket=bucket_name)
    s3.delete_bucket(Bucket=bucket_name)


def test_aws_cli_and_minio_list_versions(aws_cli, fjord_server, s3, bucket):
    put_keys(s3, bucket, ["one", "two"])
    out = json.loads(aws_cli("s3api", "list-object-versions", "--bucket", bucket).stdout_text)
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in out["Versions"]] == [
        ("one", "null", True), ("two", "null", True)]
    client = Minio(fjord_server.host, access_key=fjord_server.access_key, secret_key=fjord_server.secret_key,
                   secure=False, region="us-east-1")
    listed = list(client.list_objects(bucket, include_version=True))
    assert [(o.object_name, o.version_id, o.is_latest) for o in listed] == [("one", "null", "true"),
                                                                         ("two", "null", "true")]
    assert client.get_bucket_versioning(bucket).status is None


# ---- ListBuckets paging ----

def test_list_buckets_pages_by_max_buckets_token_and_prefix(s3):
    stem = unique_bucket_name("lbp")
    names = [f"{stem}-{i}" for i in range(5)]
    for name in names:
        s3.create_bucket(Bucket=name)
    try:
        seen, token = [], None
        while True:
            kwargs = {"MaxBuckets": 2, "Prefix": stem}
            if token:
                kwargs["ContinuationToken"] = token
            page = s3.list_buckets(**kwargs)
            assert len(page["Buckets"]) <= 2 and page["Prefix"] == stem
            seen += [b["Name"] for b in page["Buckets"]]
            token = page.get("ContinuationToken")
            if not token:
                break
        assert seen == names
        assert all(b["BucketRegion"] == "us-east-1" for b in s3.list_buckets(Prefix=stem)["Buckets"])
        paged = [b["Name"] for p in s3.get_paginator("list_buckets").paginate(
            Prefix=stem, PaginationConfig={"PageSize": 3}) for b in p["Buckets"]]
        assert paged == names
        unpaged = [b["Name"] for b in s3.list_buckets()["Buckets"]]
        assert [n for n in unpaged if n.startswith(stem)] == names and "ContinuationToken" not in s3.list_buckets()
    finally:
        for name in names:
            s3.delete_bucket(Bucket=name)


@pytest.mark.parametrize("query", [("max-buckets", "0"), ("max-buckets", "10001"), ("max-buckets", "x"),
                                   ("continuation-token", "!!"), ("prefix", "a\x01b")])
def test_list_buckets_refuses_bad_paging(fjord_server, query):
    signed = s3util.sign_headers(fjord_server.credentials, "GET", fjord_server.host, "/", [query])
    response = requests.get(f"{fjord_server.endpoint}/?{s3util.canonical_query([query])}",
                            headers=signed.headers, timeout=30)
    assert response.status_code == 400 and b"<Code>InvalidArgument</Code>" in response.content


# ---- ListObjectsV2 with an empty continuation token ----

def test_list_objects_v2_with_an_empty_continuation_token_lists_from_the_start(s3, bucket):
    put_keys(s3, bucket, ["a", "b"])
    page = s3.list_objects_v2(Bucket=bucket, ContinuationToken="")
    assert page["ContinuationToken"] == "" and page["IsTruncated"] is False
    assert [o["Key"] for o in page["Contents"]] == ["a", "b"]


# ---- DeleteBucket and unfinished uploads ----

def test_delete_bucket_aborts_uploads_when_they_are_all_it_holds(s3, bucket_name):
    s3.create_bucket(Bucket=bucket_name)
    ids = [s3.create_multipart_upload(Bucket=bucket_name, Key=f"big/{i}")["UploadId"] for i in range(3)]
    s3.upload_part(Bucket=bucket_name, Key="big/0", UploadId=ids[0], PartNumber=1, Body=b"x" * 1024)
    s3.delete_bucket(Bucket=bucket_name)
    with pytest.raises(ClientError) as gone:
        s3.head_bucket(Bucket=bucket_name)
    assert gone.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    # Created again, the bucket has none of the old uploads.
    s3.create_bucket(Bucket=bucket_name)
    try:
        assert "Uploads" not in s3.list_multipart_uploads(Bucket=bucket_name)
    finally:
        s3.delete_bucket(Bucket=bucket_name)


def test_delete_bucket_with_objects_keeps_its_uploads(s3, bucket_name):
    s3.create_bucket(Bucket=bucket_name)
    try:
        s3.put_object(Bucket=bucket_name, Key="kept", Body=b"1")
        upload = s3.create_multipart_upload(Bucket=bucket_name, Key="pending")["UploadId"]
        with pytest.raises(ClientError) as refused:
            s3.delete_bucket(Bucket=bucket_name)
        assert error_of(refused) == (409, "BucketNotEmpty")
        assert [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket_name)["Uploads"]] == [upload]
        s3.abort_multipart_upload(Bucket=bucket_name, Key="pending", UploadId=upload)
    finally:
        empty_and_delete_bucket(s3, bucket_name)
