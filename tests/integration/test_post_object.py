"""POST Object (browser-based uploads, docs/s3-compatibility.md): forms made by boto3's
generate_presigned_post (Signature Version 4 and 2) and by hand with a Version 2 policy signature,
sent by requests as a browser would send them; every policy rule (expiry, conditions, fields no
condition names, content-length-range) and every malformed form refused with nothing stored."""

import base64
import datetime
import hashlib
import hmac
import json
import xml.etree.ElementTree as ET

import pytest
import requests
from botocore.exceptions import ClientError

from conftest import make_client
from test_users import ALICE, add_user, client_of


def post(url, fields, file=("upload.bin", b"bar"), **kwargs):
    """A multipart/form-data POST with the fields in order, then the file (as a browser sends it)."""
    files = list(fields.items()) if isinstance(fields, dict) else list(fields)
    parts = [(name, (None, value)) for name, value in files]
    if file is not None:
        parts.append(("file", file))
    return requests.post(url, files=parts, timeout=60, allow_redirects=False, **kwargs)


def code_of(answer):
    return ET.fromstring(answer.content).findtext("Code")


def exists(s3, bucket, key):
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except ClientError as e:
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        return False


def in_an_hour():
    when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def v2_form(server, bucket, conditions, fields, expiration=None, secret=None, access_key=None):
    """A form signed as older browser forms are: base64 HMAC-SHA1 of the base64 policy."""
    document = {"expiration": expiration or in_an_hour(), "conditions": conditions}
    policy = base64.b64encode(json.dumps(document).encode())
    signature = base64.b64encode(hmac.new((secret or server.secret_key).encode(), policy, hashlib.sha1).digest())
    return [*fields, ("AWSAccessKeyId", access_key or server.access_key), ("policy", policy),
            ("signature", signature)]


@pytest.mark.parametrize("signature_version", ["s3v4", None])
def test_presigned_post_from_boto3(fjord_server, bucket, rng, signature_version):
    """boto3 signs a POST policy with Signature Version 4 when told to, and with Version 2 by default
    for a custom endpoint (as it presigns URLs)."""
    s3 = make_client(fjord_server, **({"signature_version": signature_version} if signature_version else {}))
    data = rng.randbytes(3 * 1024 * 1024 + 17)  # several windows of the form decoder
    form = s3.generate_presigned_post(bucket, "uploads/${filename}",
                                      Fields={"Content-Type": "application/x-test", "x-amz-meta-origin": "form"},
                                      Conditions=[["starts-with", "$Content-Type", "application/"],
                                                  {"x-amz-meta-origin": "form"},
                                                  ["content-length-range", 1, 8 * 1024 * 1024]])
    assert ("x-amz-signature" in form["fields"]) == (signature_version == "s3v4")
    answer = post(form["url"], form["fields"], ("checkpoint.bin", data))
    assert answer.status_code == 204, answer.text
    assert answer.headers["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert answer.headers["Location"].endswith(f"/{bucket}/uploads/checkpoint.bin")
    got = s3.get_object(Bucket=bucket, Key="uploads/checkpoint.bin")
    assert got["Body"].read() == data
    assert got["ContentType"] == "application/x-test"
    assert got["Metadata"] == {"origin": "form"}
    assert got["ETag"] == answer.headers["ETag"]


def test_success_status_and_redirect(s3, bucket, fjord_server):
    form = s3.generate_presigned_post(bucket, "a.txt", Fields={"success_action_status": "201"},
                                      Conditions=[{"success_action_status": "201"}])
    answer = post(form["url"], form["fields"])
    assert answer.status_code == 201, answer.text
    doc = ET.fromstring(answer.content)
    assert doc.tag == "PostResponse"
    assert (doc.findtext("Bucket"), doc.findtext("Key")) == (bucket, "a.txt")
    assert doc.findtext("ETag") == f'"{hashlib.md5(b"bar").hexdigest()}"'
    # An unknown status is 204; 200 answers with an empty body
    for sent, expected in (("404", 204), ("200", 200)):
        form = s3.generate_presigned_post(bucket, "b.txt", Fields={"success_action_status": sent},
                                          Conditions=[{"success_action_status": sent}])
        answer = post(form["url"], form["fields"])
        assert (answer.status_code, answer.content) == (expected, b"")
    target = "https://example.com/done?from=form"
    form = s3.generate_presigned_post(bucket, "c d.txt", Fields={"success_action_redirect": target},
                                      Conditions=[{"success_action_redirect": target}])
    answer = post(form["url"], form["fields"])
    assert answer.status_code == 303
    etag = hashlib.md5(b"bar").hexdigest()
    assert answer.headers["Location"] == f"{target}&bucket={bucket}&key=c%20d.txt&etag=%22{etag}%22"


def test_signature_version_2_form_with_tagging_and_acl(s3, bucket, fjord_server):
    tagging = "<Tagging><TagSet><Tag><Key>team</Key><Value>ml</Value></Tag></TagSet></Tagging>"
    fields = [("KEY", "v2.txt"), ("acl", "private"), ("tagging", tagging), ("x-ignore-extra", "1")]
    conditions = [{"bucket": bucket}, ["starts-with", "$key", "v2"], {"acl": "private"},
                  ["starts-with", "$tagging", ""]]
    answer = post(f"{fjord_server.endpoint}/{bucket}", v2_form(fjord_server, bucket, conditions, fields))
    assert answer.status_code == 204, answer.text
    assert s3.get_object(Bucket=bucket, Key="v2.txt")["Body"].read() == b"bar"
    assert s3.get_object_tagging(Bucket=bucket, Key="v2.txt")["TagSet"] == [{"Key": "team", "Value": "ml"}]


def test_policy_refusals_store_nothing(s3, bucket, fjord_server):
    url = f"{fjord_server.endpoint}/{bucket}"
    base = [{"bucket": bucket}, ["starts-with", "$key", "ok/"]]
    cases = [
        # (form, status, code)
        (v2_form(fjord_server, bucket, base, [("key", "ok/1")], expiration="2020-01-01T00:00:00Z"),
         403, "AccessDenied"),
        (v2_form(fjord_server, bucket, base, [("key", "elsewhere/1")]), 403, "AccessDenied"),
        (v2_form(fjord_server, bucket, base, [("key", "ok/1"), ("x-amz-meta-a", "b")]), 403, "AccessDenied"),
        (v2_form(fjord_server, bucket, base[1:], [("key", "ok/1")]), 403, "AccessDenied"),
        (v2_form(fjord_server, bucket, base, [("key", "ok/1")], secret="not-the-secret-key"),
         403, "SignatureDoesNotMatch"),
        (v2_form(fjord_server, bucket, base, [("key", "ok/1")], access_key="NOSUCHACCESSKEY"),
         403, "InvalidAccessKeyId"),
        (v2_form(fjord_server, bucket, base + [["content-length-range", 0, 2]], [("key", "ok/1")]),
         400, "EntityTooLarge"),
        (v2_form(fjord_server, bucket, base + [["content-length-range", 10, 20]], [("key", "ok/1")]),
         400, "EntityTooSmall"),
        (v2_form(fjord_server, bucket, base + [["content-length-range", 0, 10**30]], [("key", "ok/1")]),
         400, "InvalidPolicyDocument"),
        (v2_form(fjord_server, bucket, base + [{}], [("key", "ok/1")]), 400, "InvalidPolicyDocument"),
        (v2_form(fjord_server, bucket, [{"bucket": bucket}], []), 400, "InvalidArgument"),  # no key
        ([("key", "ok/1"), ("policy", "e30=")], 400, "InvalidArgument"),  # a policy nobody signed
        ([("key", "ok/1"), ("AWSAccessKeyId", fjord_server.access_key)], 400, "InvalidArgument"),
        ([("key", "ok/1")], 403, "AccessDenied"),  # anonymous, and the bucket is private
    ]
    for form, status, code in cases:
        answer = post(url, form)
        assert (answer.status_code, code_of(answer)) == (status, code), (form, answer.text)
    assert not exists(s3, bucket, "ok/1") and not exists(s3, bucket, "elsewhere/1")


def test_malformed_forms_are_refused(s3, bucket, fjord_server):
    url = f"{fjord_server.endpoint}/{bucket}"
    sign = lambda fields, conditions=(): v2_form(  # noqa: E731
        fjord_server, bucket, [{"bucket": bucket}, ["starts-with", "$key", ""], *conditions], fields)
    assert requests.post(url, data={"key": "k"}, timeout=10).status_code == 412  # not multipart
    answer = post(url, sign([("key", "k")]), file=None)
    assert (answer.status_code, code_of(answer)) == (400, "IncorrectNumberOfFilesInPostRequest")
    answer = post(url, sign([("key", "k")]) + [("file", b"one")])  # a second file part after the first
    assert answer.status_code == 400
    answer = post(url, sign([("key", "k"), ("x-ignore-pad", "p" * 70000)]))
    assert (answer.status_code, code_of(answer)) == (400, "MaxPostPreDataLengthExceeded")
    # Values a header cannot carry, a key that is not UTF-8, a tag set that is not XML
    for fields, conditions in (([("key", "k"), ("x-amz-meta-a", "x\r\nSet-Cookie: y")],
                                [["starts-with", "$x-amz-meta-a", ""]]),
                               ([("key", "k"), ("Content-Type", "text/plain\x00")],
                                [["starts-with", "$content-type", ""]]),
                               ([("key", b"k\xff")], []),
                               ([("key", "k"), ("tagging", "<Tagging>")], [["starts-with", "$tagging", ""]])):
        answer = post(url, sign(fields, conditions))
        assert answer.status_code == 400, (fields, answer.text)
    assert not exists(s3, bucket, "k")
    # A signed form cut short before its closing boundary stores nothing
    parts = [(name, (None, value)) for name, value in sign([("key", "k")])] + [("file", ("f", b"data"))]
    prepared = requests.Request("POST", url, files=parts).prepare()
    cut = prepared.body[:prepared.body.rindex(b"\r\n--")]
    answer = requests.post(url, data=cut, headers={"Content-Type": prepared.headers["Content-Type"]},
                           timeout=10)
    assert (answer.status_code, code_of(answer)) == (400, "MalformedPOSTRequest"), answer.text
    assert not exists(s3, bucket, "k")


def test_post_access_follows_the_bucket(make_server):
    server = make_server()
    add_user(server, ALICE)
    root = server.client()
    root.create_bucket(Bucket="posts")
    alice = client_of(server, ALICE)
    # Alice signs her own form, but the bucket is root's
    form = alice.generate_presigned_post("posts", "mine.txt")
    answer = post(form["url"], form["fields"])
    assert (answer.status_code, code_of(answer)) == (403, "AccessDenied")
    # A bucket policy that lets anyone put under drop/ lets an unsigned form in, there only
    root.put_bucket_policy(Bucket="posts", Policy=json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": "*", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::posts/drop/*"}]}))
    assert post(f"{server.endpoint}/posts", [("key", "drop/anon.txt")]).status_code == 204
    assert post(f"{server.endpoint}/posts", [("key", "other/anon.txt")]).status_code == 403
    assert root.get_object(Bucket="posts", Key="drop/anon.txt")["Body"].read() == b"bar"
    answer = post(form["url"], form["fields"])
    assert answer.status_code == 403  # Alice's own form is still not hers to use here
    with pytest.raises(ClientError):
        root.head_object(Bucket="posts", Key="mine.txt")
