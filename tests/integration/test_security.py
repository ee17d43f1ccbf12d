"""Security properties seen from a client: hostile keys never reach the file system and round-trip
exactly, XML tricks are refused, presigned URLs are scoped to their method, bucket and key."""

import os
import urllib.parse

import pytest
import requests

import s3util
from conftest import make_client
from multipart_support import error_code, signed_request

HOSTILE_KEYS = [
    "../../../../etc/passwd",
    "a/../../b",
    "/leading/slash",
    "..",
    "./.",
    "dir//double//slash",
    "nul\x00inside",
    "percent%2F%00encoded",
    "unicode-\u00e9\u20ac\U0001F600",
    "k" * 1024,
]


def test_hostile_keys_round_trip_and_never_touch_the_file_system(fjord_server, bucket):
    s3 = make_client(fjord_server)
    for i, key in enumerate(HOSTILE_KEYS):
        s3.put_object(Bucket=bucket, Key=key, Body=f"body {i}".encode())
    for i, key in enumerate(HOSTILE_KEYS):
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == f"body {i}".encode(), repr(key)
    listed = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):  # botocore asks for url encoding
        listed += [o["Key"] for o in page.get("Contents", [])]
    assert sorted(listed) == sorted(HOSTILE_KEYS)
    # Data files are named by generated ids: no path outside the data directory, no name from a key.
    data_dir = fjord_server.data_dirs[0]
    for root, _dirs, files in os.walk(data_dir):
        assert os.path.realpath(root).startswith(os.path.realpath(data_dir))
        for name in files:
            assert "passwd" not in name and "unicode" not in name and "k" * 64 not in name
    assert not os.path.exists("/etc/passwd.fjord")


def test_invalid_utf8_key_is_refused(fjord_server, bucket):
    """S3 keys are UTF-8: a key that is not is refused (it could be stored but not listed in a
    well-formed document); test_keys.py has the rest."""
    raw_key = b"bad-\xff\xfe-utf8"
    path = "/" + bucket + "/" + urllib.parse.quote(raw_key, safe="")
    signed = s3util.sign_headers(fjord_server.credentials, "PUT", fjord_server.host, path,
                                 payload_hash=s3util.sha256_hex(b"x"))
    put = requests.put(fjord_server.endpoint + path, headers=signed.headers, data=b"x", timeout=10)
    assert put.status_code == 400 and error_code(put) == "InvalidURI", put.text
    listed = signed_request(fjord_server, "GET", bucket, query=[("encoding-type", "url"), ("list-type", "2")])
    assert listed.status_code == 200
    assert s3util.xml_find_all(listed.content, "Contents/Key") == []


@pytest.mark.parametrize("body", [
    b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x "boom">]><Delete><Object><Key>&x;</Key></Object></Delete>',
    b'<?xml version="1.0"?><!DOCTYPE d SYSTEM "file:///etc/passwd"><Delete><Object><Key>k</Key></Object></Delete>',
])
def test_xml_with_a_dtd_is_refused(fjord_server, bucket, body):
    response = signed_request(fjord_server, "POST", bucket, query=[("delete", "")],
                              headers={"Content-MD5": s3util.md5_b64(body)}, body=body)
    assert response.status_code == 400 and error_code(response) == "MalformedXML"


def test_presigned_url_is_scoped_to_method_bucket_and_key(fjord_server, bucket):
    s3 = make_client(fjord_server, signature_version="s3v4")
    s3.put_object(Bucket=bucket, Key="secret", Body=b"secret")
    s3.put_object(Bucket=bucket, Key="other", Body=b"other")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "secret"}, ExpiresIn=300)
    assert requests.get(url, timeout=10).content == b"secret"
    # Same signature, other key / other method: refused.
    assert requests.get(url.replace("/secret?", "/other?"), timeout=10).status_code == 403
    assert requests.put(url, data=b"overwrite", timeout=10).status_code == 403
    assert requests.delete(url, timeout=10).status_code == 403
    assert s3.get_object(Bucket=bucket, Key="secret")["Body"].read() == b"secret"


def test_every_endpoint_but_health_needs_authentication(fjord_server, bucket):
    base = fjord_server.endpoint
    for method, path in [("GET", "/"), ("GET", f"/{bucket}"), ("PUT", f"/{bucket}/k"), ("DELETE", f"/{bucket}"),
                         ("POST", f"/{bucket}?delete"), ("GET", f"/{bucket}?uploads"), ("HEAD", f"/{bucket}/k"),
                         ("GET", "/metrics")]:
        response = requests.request(method, base + path, timeout=10)
        assert response.status_code == 403, (method, path, response.status_code)
    for path in ("/health/live", "/health/ready"):
        response = requests.get(base + path, timeout=10)
        assert response.status_code == 200 and response.content == b""


def test_expected_bucket_owner_is_checked(s3, bucket):
    """x-amz-expected-bucket-owner / x-amz-source-expected-bucket-owner: the owner's ID is the one
    ListBuckets names; any other is refused with 403 AccessDenied before anything happens."""
    from botocore.exceptions import ClientError

    owner = s3.list_buckets()["Owner"]["ID"]
    s3.put_object(Bucket=bucket, Key="owned", Body=b"x", ExpectedBucketOwner=owner)
    assert s3.get_object(Bucket=bucket, Key="owned", ExpectedBucketOwner=owner)["Body"].read() == b"x"
    s3.head_bucket(Bucket=bucket, ExpectedBucketOwner=owner)
    calls = [
        lambda: s3.put_object(Bucket=bucket, Key="other", Body=b"y", ExpectedBucketOwner="111122223333"),
        lambda: s3.get_object(Bucket=bucket, Key="owned", ExpectedBucketOwner="111122223333"),
        lambda: s3.delete_object(Bucket=bucket, Key="owned", ExpectedBucketOwner="111122223333"),
        lambda: s3.list_objects_v2(Bucket=bucket, ExpectedBucketOwner="111122223333"),
        lambda: s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "owned"},
                               ExpectedSourceBucketOwner="111122223333"),
    ]
    for call in calls:
        with pytest.raises(ClientError) as refused:
            call()
        assert refused.value.response["Error"]["Code"] == "AccessDenied", refused.value.response
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError) as refused:
        s3.head_bucket(Bucket=bucket, ExpectedBucketOwner="111122223333")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    # Nothing was written, deleted or copied by the refused calls.
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["owned"]
    s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "owned"},
                   ExpectedSourceBucketOwner=owner, ExpectedBucketOwner=owner)


def test_what_the_server_writes_is_its_users_alone(tmp_dir):
    """The metadata journal holds every user's secret: the data directory the server makes is 0700, and
    every file and directory it writes there (journals, data files, its lock and format files) is
    readable by the server's user only."""
    from conftest import FjordServer
    from test_users import ALICE, add_user

    server = FjordServer(tmp_dir / "modes", name="fjord-modes")
    for directory in server.data_dirs:
        directory.rmdir()  # the server makes its data directory itself
    server.start()
    try:
        add_user(server, ALICE)
        s3 = server.client()
        s3.create_bucket(Bucket="modes")
        s3.put_object(Bucket="modes", Key="big", Body=os.urandom(3 << 20))
        s3.put_object(Bucket="modes", Key="small", Body=b"x")
        found = []
        for root, dirs, files in os.walk(server.data_dirs[0]):
            for name in dirs + files + ([""] if root == str(server.data_dirs[0]) else []):
                path = os.path.join(root, name)
                mode = os.lstat(path).st_mode
                found.append((path, oct(mode & 0o777)))
                assert mode & 0o077 == 0, (path, oct(mode & 0o777))
        assert any("journal" in p for p, _ in found), found
        assert len(found) > 5, found
    finally:
        assert server.stop() == 0, server.log_tail()
