"""Bucket versioning as S3 has it, driven by boto3, the aws CLI and minio-py: PutBucketVersioning
(Enabled / Suspended), version ids on every write, GET / HEAD / DELETE / tagging / copy by versionId,
delete markers, ListObjectVersions with key and version-id markers, and versions kept across a restart
and a SIGKILL."""

import json

import pytest
from botocore.exceptions import ClientError

from conftest import make_kv_bucket, unique_bucket_name


def error_of(call):
    with pytest.raises(ClientError) as e:
        call()
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def enable(s3, bucket, status="Enabled"):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": status})


def body(s3, bucket, key, **kwargs):
    return s3.get_object(Bucket=bucket, Key=key, **kwargs)["Body"].read()


def all_versions(s3, bucket, **kwargs):
    versions, markers = [], []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, **kwargs):
        versions += page.get("Versions", [])
        markers += page.get("DeleteMarkers", [])
    return versions, markers


def test_versioning_state(s3, bucket):
    state = s3.get_bucket_versioning(Bucket=bucket)
    assert "Status" not in state
    enable(s3, bucket)
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    enable(s3, bucket, "Suspended")
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"
    assert error_of(lambda: enable(s3, bucket, "Disabled")) == ("MalformedXML", 400)
    assert error_of(lambda: enable(s3, unique_bucket_name("none"))) == ("NoSuchBucket", 404)


def test_every_write_is_a_version(s3, bucket):
    enable(s3, bucket)
    ids = [s3.put_object(Bucket=bucket, Key="ckpt", Body=f"step-{i}".encode())["VersionId"]
           for i in range(3)]
    assert len(set(ids)) == 3 and "null" not in ids
    assert body(s3, bucket, "ckpt") == b"step-2"
    for i, vid in enumerate(ids):
        got = s3.get_object(Bucket=bucket, Key="ckpt", VersionId=vid)
        assert got["Body"].read() == f"step-{i}".encode() and got["VersionId"] == vid
        assert s3.head_object(Bucket=bucket, Key="ckpt", VersionId=vid)["ContentLength"] == 6
    assert s3.head_object(Bucket=bucket, Key="ckpt")["VersionId"] == ids[2]
    versions, markers = all_versions(s3, bucket)
    assert [v["VersionId"] for v in versions] == ids[::-1] and markers == []
    assert [v["IsLatest"] for v in versions] == [True, False, False]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["ckpt"]
    ranged = s3.get_object(Bucket=bucket, Key="ckpt", VersionId=ids[0], Range="bytes=5-5")
    assert ranged["Body"].read() == b"0"


def test_delete_leaves_a_marker_and_older_versions_stay(s3, bucket):
    enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="k", Body=b"two")["VersionId"]
    deleted = s3.delete_object(Bucket=bucket, Key="k")
    assert deleted["DeleteMarker"] is True
    marker = deleted["VersionId"]
    assert marker not in (v1, v2)
    assert error_of(lambda: s3.get_object(Bucket=bucket, Key="k")) == ("NoSuchKey", 404)
    with pytest.raises(ClientError) as gone:
        s3.head_object(Bucket=bucket, Key="k")
    headers = gone.value.response["ResponseMetadata"]["HTTPHeaders"]
    assert gone.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert headers["x-amz-delete-marker"] == "true" and headers["x-amz-version-id"] == marker
    assert error_of(lambda: s3.get_object(Bucket=bucket, Key="k", VersionId=marker)) == \
        ("MethodNotAllowed", 405)
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    assert body(s3, bucket, "k", VersionId=v1) == b"one"
    versions, markers = all_versions(s3, bucket)
    assert [(m["VersionId"], m["IsLatest"]) for m in markers] == [(marker, True)]
    assert [(v["VersionId"], v["IsLatest"]) for v in versions] == [(v2, False), (v1, False)]
    # Removing the marker by its id brings the newest version back
    removed = s3.delete_object(Bucket=bucket, Key="k", VersionId=marker)
    assert removed["DeleteMarker"] is True and removed["VersionId"] == marker
    assert body(s3, bucket, "k") == b"two"
    # Removing a version for good: the one before it becomes current
    assert s3.delete_object(Bucket=bucket, Key="k", VersionId=v2)["VersionId"] == v2
    assert body(s3, bucket, "k") == b"one"
    assert error_of(lambda: s3.get_object(Bucket=bucket, Key="k", VersionId=v2)) == \
        ("NoSuchVersion", 404)
    # Deleting a key that does not exist still leaves a marker in a versioned bucket
    assert s3.delete_object(Bucket=bucket, Key="never")["DeleteMarker"] is True


def test_bucket_with_versions_is_not_empty(s3):
    name = unique_bucket_name("versions-left")
    s3.create_bucket(Bucket=name)
    enable(s3, name)
    vid = s3.put_object(Bucket=name, Key="a", Body=b"x")["VersionId"]
    marker = s3.delete_object(Bucket=name, Key="a")["VersionId"]
    assert error_of(lambda: s3.delete_bucket(Bucket=name)) == ("BucketNotEmpty", 409)
    s3.delete_object(Bucket=name, Key="a", VersionId=vid)
    assert error_of(lambda: s3.delete_bucket(Bucket=name)) == ("BucketNotEmpty", 409)
    s3.delete_object(Bucket=name, Key="a", VersionId=marker)
    s3.delete_bucket(Bucket=name)


def test_suspended_versioning_replaces_the_null_version(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"before")  # the null version
    enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"versioned")["VersionId"]
    assert body(s3, bucket, "k", VersionId="null") == b"before"
    enable(s3, bucket, "Suspended")
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"suspended-1")
    assert put.get("VersionId", "null") == "null"
    s3.put_object(Bucket=bucket, Key="k", Body=b"suspended-2")
    versions, _ = all_versions(s3, bucket)
    assert [(v["VersionId"], v["IsLatest"]) for v in versions] == [("null", True), (v1, False)]
    assert body(s3, bucket, "k", VersionId="null") == b"suspended-2"
    assert body(s3, bucket, "k", VersionId=v1) == b"versioned"
    deleted = s3.delete_object(Bucket=bucket, Key="k")
    assert deleted["DeleteMarker"] is True and deleted["VersionId"] == "null"
    versions, markers = all_versions(s3, bucket)
    assert [v["VersionId"] for v in versions] == [v1]
    assert [m["VersionId"] for m in markers] == ["null"]


def test_answers_about_the_null_version_name_it_once_versioning_is_on(s3, bucket):
    s3.put_object(Bucket=bucket, Key="old", Body=b"before")
    s3.put_object_tagging(Bucket=bucket, Key="old", Tagging={"TagSet": [{"Key": "a", "Value": "1"}]})
    # A bucket that never had versioning names no version
    assert "VersionId" not in s3.head_object(Bucket=bucket, Key="old")
    assert "VersionId" not in s3.get_object(Bucket=bucket, Key="old")
    assert "VersionId" not in s3.get_object_tagging(Bucket=bucket, Key="old")
    enable(s3, bucket)
    # The object from before is the null version, and S3 says so without being asked
    assert s3.head_object(Bucket=bucket, Key="old")["VersionId"] == "null"
    assert s3.get_object(Bucket=bucket, Key="old")["VersionId"] == "null"
    assert s3.get_object_tagging(Bucket=bucket, Key="old")["VersionId"] == "null"
    attrs = s3.get_object_attributes(Bucket=bucket, Key="old", ObjectAttributes=["ETag"])
    assert attrs["VersionId"] == "null"
    v1 = s3.put_object(Bucket=bucket, Key="new", Body=b"v1")["VersionId"]
    assert s3.head_object(Bucket=bucket, Key="new")["VersionId"] == v1
    enable(s3, bucket, "Suspended")
    s3.put_object(Bucket=bucket, Key="new", Body=b"suspended")
    assert s3.head_object(Bucket=bucket, Key="new")["VersionId"] == "null"
    assert s3.head_object(Bucket=bucket, Key="new", VersionId=v1)["VersionId"] == v1


def test_version_ids_are_checked(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    # Without versioning only "null" names anything
    assert body(s3, bucket, "k", VersionId="null") == b"x"
    assert error_of(lambda: s3.get_object(Bucket=bucket, Key="k", VersionId="0" * 32)) == \
        ("InvalidArgument", 400)
    enable(s3, bucket)
    assert error_of(lambda: s3.get_object(Bucket=bucket, Key="k", VersionId="not-an-id")) == \
        ("InvalidArgument", 400)
    assert error_of(lambda: s3.get_object(Bucket=bucket, Key="k", VersionId="0" * 32)) == \
        ("NoSuchVersion", 404)
    assert body(s3, bucket, "k", VersionId="null") == b"x"


def test_tagging_and_attributes_by_version(s3, bucket):
    enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="k", Body=b"two!")["VersionId"]
    tags = {"TagSet": [{"Key": "stage", "Value": "old"}]}
    assert s3.put_object_tagging(Bucket=bucket, Key="k", VersionId=v1, Tagging=tags)["VersionId"] == v1
    assert s3.get_object_tagging(Bucket=bucket, Key="k", VersionId=v1)["TagSet"] == tags["TagSet"]
    assert s3.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == []
    # Tagging an old version does not make it current
    assert body(s3, bucket, "k") == b"two!"
    attrs = s3.get_object_attributes(Bucket=bucket, Key="k", VersionId=v1, ObjectAttributes=["ObjectSize"])
    assert attrs["ObjectSize"] == 3 and attrs["VersionId"] == v1
    s3.delete_object_tagging(Bucket=bucket, Key="k", VersionId=v1)
    assert s3.get_object_tagging(Bucket=bucket, Key="k", VersionId=v1)["TagSet"] == []
    assert s3.head_object(Bucket=bucket, Key="k")["VersionId"] == v2


def test_copy_from_a_version_and_onto_itself(s3, bucket):
    enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"first")["VersionId"]
    s3.put_object(Bucket=bucket, Key="k", Body=b"second")
    # Restoring an old version: a copy of it becomes the newest version
    copied = s3.copy_object(Bucket=bucket, Key="k", CopySource={"Bucket": bucket, "Key": "k", "VersionId": v1})
    assert copied["CopySourceVersionId"] == v1
    assert body(s3, bucket, "k") == b"first"
    assert copied["VersionId"] == s3.head_object(Bucket=bucket, Key="k")["VersionId"]
    # A metadata-only copy onto itself is a new version too
    replaced = s3.copy_object(Bucket=bucket, Key="k", CopySource={"Bucket": bucket, "Key": "k"},
                              Metadata={"step": "3"}, MetadataDirective="REPLACE")
    assert s3.head_object(Bucket=bucket, Key="k")["Metadata"] == {"step": "3"}
    versions, _ = all_versions(s3, bucket)
    assert len(versions) == 4 and versions[0]["VersionId"] == replaced["VersionId"]
    # ... but one that changes nothing is refused, as without versioning
    assert error_of(lambda: s3.copy_object(Bucket=bucket, Key="k",
                                           CopySource={"Bucket": bucket, "Key": "k"})) == \
        ("InvalidRequest", 400)
    # UploadPartCopy from a version
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    part = s3.upload_part_copy(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1,
                               CopySource={"Bucket": bucket, "Key": "k", "VersionId": v1})
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]})
    assert done["VersionId"] and body(s3, bucket, "mp") == b"first"


def test_delete_objects_by_version(s3, bucket):
    enable(s3, bucket)
    ids = [s3.put_object(Bucket=bucket, Key=f"k{i % 2}", Body=b"x" * i)["VersionId"] for i in range(4)]
    answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k0"}]})
    assert answer["Deleted"][0]["DeleteMarker"] is True
    marker = answer["Deleted"][0]["DeleteMarkerVersionId"]
    versions, markers = all_versions(s3, bucket)
    objects = [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in versions + markers]
    answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": objects})
    assert sorted(d["VersionId"] for d in answer["Deleted"]) == sorted(ids + [marker])
    assert [d for d in answer["Deleted"] if d.get("DeleteMarker")] == \
        [{"Key": "k0", "VersionId": marker, "DeleteMarker": True, "DeleteMarkerVersionId": marker}]
    assert all_versions(s3, bucket) == ([], [])
    bad = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k0", "VersionId": "bogus"}]})
    assert bad["Errors"][0]["Code"] == "InvalidArgument"


def test_list_object_versions_pages_through_markers(s3, bucket):
    enable(s3, bucket)
    expected = []
    for key in ["a", "b/1", "b/2", "c"]:
        ids = [s3.put_object(Bucket=bucket, Key=key, Body=b"v")["VersionId"] for _ in range(3)]
        expected += [(key, vid) for vid in reversed(ids)]
    marker = s3.delete_object(Bucket=bucket, Key="c")["VersionId"]
    expected.insert(len(expected) - 3, ("c", marker))
    seen = []
    for page in s3.get_paginator("list_object_versions").paginate(
            Bucket=bucket, PaginationConfig={"PageSize": 2}):
        entries = page.get("Versions", []) + page.get("DeleteMarkers", [])
        assert len(entries) <= 2
        seen += sorted(((e["Key"], e["VersionId"]) for e in entries), key=expected.index)
    assert seen == expected
    # Resuming within a key, and a delimiter that folds b/ into a common prefix
    page = s3.list_object_versions(Bucket=bucket, KeyMarker="a", VersionIdMarker=expected[0][1])
    assert [(v["Key"], v["VersionId"]) for v in page["Versions"]][:2] == expected[1:3]
    page = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["b/"]
    assert {v["Key"] for v in page["Versions"]} == {"a", "c"}
    assert error_of(lambda: s3.list_object_versions(Bucket=bucket, VersionIdMarker=marker)) == \
        ("InvalidArgument", 400)


def test_versions_survive_restart_and_sigkill(make_server):
    server = make_server()
    s3 = server.client()
    s3.create_bucket(Bucket="ckpts")
    enable(s3, "ckpts")
    big = bytes(range(256)) * 4096  # a data file, not inline
    v1 = s3.put_object(Bucket="ckpts", Key="model.pt", Body=big)["VersionId"]
    v2 = s3.put_object(Bucket="ckpts", Key="model.pt", Body=b"small")["VersionId"]
    server.restart()
    s3 = server.client()
    assert s3.get_bucket_versioning(Bucket="ckpts")["Status"] == "Enabled"
    assert body(s3, "ckpts", "model.pt", VersionId=v1) == big
    marker = s3.delete_object(Bucket="ckpts", Key="model.pt")["VersionId"]
    v3 = s3.put_object(Bucket="ckpts", Key="other", Body=big)["VersionId"]
    server.kill()  # acknowledged means durable
    server.start()
    s3 = server.client()
    versions, markers = all_versions(s3, "ckpts")
    assert [(v["Key"], v["VersionId"]) for v in versions] == \
        [("model.pt", v2), ("model.pt", v1), ("other", v3)]
    assert [m["VersionId"] for m in markers] == [marker]
    assert body(s3, "ckpts", "model.pt", VersionId=v1) == big
    assert body(s3, "ckpts", "model.pt", VersionId=v2) == b"small"


def test_aws_cli_versions(aws_cli, bucket):
    aws_cli("s3api", "put-bucket-versioning", "--bucket", bucket,
            "--versioning-configuration", "Status=Enabled")
    first = json.loads(aws_cli("s3api", "put-object", "--bucket", bucket, "--key", "k").stdout_text)
    aws_cli("s3api", "put-object", "--bucket", bucket, "--key", "k")
    listed = json.loads(aws_cli("s3api", "list-object-versions", "--bucket", bucket).stdout_text)
    assert len(listed["Versions"]) == 2
    aws_cli("s3api", "delete-object", "--bucket", bucket, "--key", "k", "--version-id",
            first["VersionId"])
    listed = json.loads(aws_cli("s3api", "list-object-versions", "--bucket", bucket).stdout_text)
    assert first["VersionId"] not in [v["VersionId"] for v in listed["Versions"]]


def test_minio_versions(fjord_server, bucket):
    from minio import Minio
    from minio.commonconfig import ENABLED
    from minio.versioningconfig import VersioningConfig
    import io
    client = Minio(fjord_server.host, access_key=fjord_server.access_key,
                   secret_key=fjord_server.secret_key, secure=False)
    client.set_bucket_versioning(bucket, VersioningConfig(ENABLED))
    assert client.get_bucket_versioning(bucket).status == ENABLED
    a = client.put_object(bucket, "k", io.BytesIO(b"a"), 1).version_id
    client.put_object(bucket, "k", io.BytesIO(b"bb"), 2)
    listed = list(client.list_objects(bucket, include_version=True))
    assert len(listed) == 2 and {o.version_id for o in listed} >= {a}
    assert client.get_object(bucket, "k", version_id=a).read() == b"a"
    client.remove_object(bucket, "k", version_id=a)
    assert [o.version_id for o in client.list_objects(bucket, include_version=True)] != [a]


def test_kv_bucket_keeps_no_versions(s3):
    name = unique_bucket_name("kv-versions")
    make_kv_bucket(s3, name, capacity_bytes=64 * 1024 * 1024)
    try:
        assert error_of(lambda: enable(s3, name)) == ("InvalidRequest", 400)
        assert "Status" not in s3.get_bucket_versioning(Bucket=name)
    finally:
        s3.delete_bucket(Bucket=name)


def test_rclone_lists_and_reads_old_versions(rclone, s3, bucket, tmp_dir):
    enable(s3, bucket)
    s3.put_object(Bucket=bucket, Key="run/model.pt", Body=b"first")
    s3.put_object(Bucket=bucket, Key="run/model.pt", Body=b"second!")
    listing = rclone("ls", "--s3-versions", f"fjord:{bucket}").stdout_text
    names = sorted(line.split()[-1] for line in listing.splitlines() if line.strip())
    assert len(names) == 2 and "run/model.pt" in names, listing
    old = next(n for n in names if n != "run/model.pt")  # rclone names it model-vTIMESTAMP.pt
    # Every version comes down, the old one under its version name
    rclone("copy", "--s3-versions", f"fjord:{bucket}/run", tmp_dir / "out")
    assert (tmp_dir / "out" / "model.pt").read_bytes() == b"second!"
    assert (tmp_dir / "out" / old.split("/")[-1]).read_bytes() == b"first"
