"""The authorization findings of the multi-user review (docs/security.md, "Review of 2026-12-07"), each
as the attacker sent it, with real processes and boto3 or hand-signed requests: a copy sees the source's
tags as a GET does; a POST form is authorized on its signed fields; a repeated grant header is seen whole
by the policy; a bucket policy never reaches an object another user owns."""

import http.client

import requests

import s3util
from test_policy import allow, error_of, policy, server  # noqa: F401 (server: a fixture)
from test_users import ALICE, BOB, client_of
from test_post_object import code_of, post


def anonymous_get(server, bucket, key):
    return requests.get(f"{server.endpoint}/{bucket}/{key}", timeout=10)


SECRET_DENIED = {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
                 "Resource": "arn:aws:s3:::pub/*",
                 "Condition": {"StringEquals": {"s3:ExistingObjectTag/secret": "true"}}}


def test_a_copy_sees_the_source_objects_tags_as_a_get_does(server):
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="pub")
    alice.put_object(Bucket="pub", Key="tagged", Body=b"secret bytes", Tagging="secret=true")
    alice.put_object(Bucket="pub", Key="plain", Body=b"open bytes")
    alice.put_bucket_policy(Bucket="pub", Policy=policy(
        allow({"AWS": BOB[0]}, "s3:GetObject", "arn:aws:s3:::pub/*"), SECRET_DENIED))
    bob.create_bucket(Bucket="bobs")
    assert error_of(lambda: bob.get_object(Bucket="pub", Key="tagged")) == ("AccessDenied", 403)
    assert error_of(lambda: bob.copy_object(Bucket="bobs", Key="copy",
                                            CopySource={"Bucket": "pub", "Key": "tagged"})) == \
        ("AccessDenied", 403)
    upload = bob.create_multipart_upload(Bucket="bobs", Key="parts")["UploadId"]
    assert error_of(lambda: bob.upload_part_copy(
        Bucket="bobs", Key="parts", UploadId=upload, PartNumber=1,
        CopySource={"Bucket": "pub", "Key": "tagged"})) == ("AccessDenied", 403)
    assert error_of(lambda: bob.head_object(Bucket="bobs", Key="copy"))[1] == 404
    # What the policy allows is still copied, whole and by part
    bob.copy_object(Bucket="bobs", Key="copy", CopySource={"Bucket": "pub", "Key": "plain"})
    assert bob.get_object(Bucket="bobs", Key="copy")["Body"].read() == b"open bytes"
    part = bob.upload_part_copy(Bucket="bobs", Key="parts", UploadId=upload, PartNumber=1,
                                CopySource={"Bucket": "pub", "Key": "plain"})
    bob.complete_multipart_upload(Bucket="bobs", Key="parts", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]})
    assert bob.get_object(Bucket="bobs", Key="parts")["Body"].read() == b"open bytes"
    # The Deny binds the bucket's owner too, copying within its own bucket
    assert error_of(lambda: alice.copy_object(Bucket="pub", Key="again",
                                              CopySource={"Bucket": "pub", "Key": "tagged"})) == \
        ("AccessDenied", 403)


def test_a_post_form_is_authorized_on_its_signed_fields_not_on_added_headers(server):
    alice = client_of(server, ALICE)
    alice.create_bucket(Bucket="posts", ObjectOwnership="ObjectWriter")
    alice.put_bucket_policy(Bucket="posts", Policy=policy(
        allow("*", "s3:PutObject", "arn:aws:s3:::posts/*",
              Condition={"StringEquals": {"s3:x-amz-acl": "bucket-owner-full-control"}})))
    url = f"{server.endpoint}/posts"
    # The form says public-read; a header naming what the policy wants must not carry it through
    answer = post(url, [("key", "drop/public"), ("acl", "public-read")],
                  headers={"x-amz-acl": "bucket-owner-full-control"})
    assert (answer.status_code, code_of(answer)) == (403, "AccessDenied"), answer.text
    assert anonymous_get(server, "posts", "drop/public").status_code == 403
    assert error_of(lambda: alice.head_object(Bucket="posts", Key="drop/public"))[1] == 404
    # The form's own field is what the policy sees
    answer = post(url, [("key", "drop/handed"), ("acl", "bucket-owner-full-control")])
    assert answer.status_code == 204, answer.text
    assert alice.get_object(Bucket="posts", Key="drop/handed")["Body"].read() == b"bar"
    answer = post(url, [("key", "drop/bare")], headers={"x-amz-acl": "bucket-owner-full-control"})
    assert answer.status_code == 403, answer.text


def raw_put(server, user, path, headers: list[tuple[str, str]], body=b"x"):
    """A PUT with `headers` sent as given (repeats included), signed as SigV4 canonicalizes repeats:
    one comma-joined value."""
    joined: dict[str, str] = {}
    for name, value in headers:
        joined[name] = joined[name] + "," + value if name in joined else value
    signed = s3util.sign_headers(s3util.Credentials(*user), "PUT", server.host, path,
                                 headers=joined).headers
    connection = http.client.HTTPConnection(server.host, timeout=10)
    try:
        connection.putrequest("PUT", path, skip_host=True, skip_accept_encoding=True)
        for name, value in signed.items():
            if name not in joined:
                connection.putheader(name, value)
        for name, value in headers:
            connection.putheader(name, value)
        connection.putheader("content-length", str(len(body)))
        connection.endheaders(body)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def test_repeated_grant_headers_are_all_seen_by_the_policy(server):
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="grants", ObjectOwnership="ObjectWriter")
    alice.put_bucket_policy(Bucket="grants", Policy=policy(
        allow({"AWS": BOB[0]}, "s3:PutObject", "arn:aws:s3:::grants/*"),
        {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
         "Resource": "arn:aws:s3:::grants/*",
         "Condition": {"StringLike": {"s3:x-amz-grant-read": "*AllUsers*"}}}))
    everyone = 'uri="http://acs.amazonaws.com/groups/global/AllUsers"'
    status, body = raw_put(server, BOB, "/grants/sneaky",
                           [("x-amz-grant-read", f'id="{ALICE[0]}"'), ("x-amz-grant-read", everyone)])
    assert status == 403, body
    assert anonymous_get(server, "grants", "sneaky").status_code == 403
    assert error_of(lambda: alice.head_object(Bucket="grants", Key="sneaky"))[1] == 404
    # One grant header of the same two grantees, and the header alone, as controls
    status, body = raw_put(server, BOB, "/grants/joined",
                           [("x-amz-grant-read", f'id="{ALICE[0]}", {everyone}')])
    assert status == 403, body
    status, body = raw_put(server, BOB, "/grants/fine", [("x-amz-grant-read", f'id="{ALICE[0]}"')])
    assert status == 200, body
    # A header the request acts on with one value is refused when repeated
    status, body = raw_put(server, BOB, "/grants/two-acls",
                           [("x-amz-acl", "bucket-owner-full-control"), ("x-amz-acl", "public-read")])
    assert status == 400 and b"InvalidArgument" in body, body
    assert anonymous_get(server, "grants", "two-acls").status_code == 403


def test_a_bucket_policy_does_not_reach_objects_another_user_owns(server):
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="shared", ObjectOwnership="ObjectWriter")
    alice.put_bucket_acl(Bucket="shared", GrantWrite=f'id="{BOB[0]}"',
                         GrantFullControl=f'id="{ALICE[0]}"')
    bob.put_object(Bucket="shared", Key="bobs", Body=b"bob's private", Tagging="owner=bob")
    alice.put_object(Bucket="shared", Key="alices", Body=b"alice's")
    alice.put_bucket_policy(Bucket="shared", Policy=policy(
        allow("*", ["s3:GetObject", "s3:GetObjectTagging", "s3:PutObjectTagging",
                    "s3:GetObjectAttributes"], "arn:aws:s3:::shared/*")))
    # The policy opens what Alice owns, to anyone
    assert anonymous_get(server, "shared", "alices").content == b"alice's"
    # ... and nothing Bob owns, to Alice or to anyone
    assert anonymous_get(server, "shared", "bobs").status_code == 403
    assert error_of(lambda: alice.get_object(Bucket="shared", Key="bobs")) == ("AccessDenied", 403)
    assert error_of(lambda: alice.get_object_tagging(Bucket="shared", Key="bobs"))[1] == 403
    assert error_of(lambda: alice.put_object_tagging(
        Bucket="shared", Key="bobs", Tagging={"TagSet": [{"Key": "owner", "Value": "alice"}]}))[1] == 403
    assert error_of(lambda: alice.get_object_attributes(
        Bucket="shared", Key="bobs", ObjectAttributes=["ObjectSize"]))[1] == 403
    # Bob, who owns it, reads and tags it; its ACL then decides for the others
    assert bob.get_object_tagging(Bucket="shared", Key="bobs")["TagSet"] == [
        {"Key": "owner", "Value": "bob"}]
    bob.put_object_tagging(Bucket="shared", Key="bobs",
                           Tagging={"TagSet": [{"Key": "owner", "Value": "still-bob"}]})
    assert bob.get_object_attributes(Bucket="shared", Key="bobs",
                                     ObjectAttributes=["ObjectSize"])["ObjectSize"] == 13
    bob.put_object_acl(Bucket="shared", Key="bobs", ACL="bucket-owner-read")
    assert alice.get_object(Bucket="shared", Key="bobs")["Body"].read() == b"bob's private"
    assert alice.get_object_tagging(Bucket="shared", Key="bobs")["TagSet"] == [
        {"Key": "owner", "Value": "still-bob"}]
    assert anonymous_get(server, "shared", "bobs").status_code == 403
    # Without the policy, the bucket owner still has its own objects
    alice.delete_bucket_policy(Bucket="shared")
    assert alice.get_object_tagging(Bucket="shared", Key="alices")["TagSet"] == []


def test_uploads_name_the_user_who_started_them(server):
    """ListMultipartUploads and ListParts named the caller (whoever listed) as every upload's Owner and
    Initiator; they name the user who started the upload, whose object it will be."""
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="uploads", ObjectOwnership="ObjectWriter")
    alice.put_bucket_acl(Bucket="uploads", GrantWrite=f'id="{BOB[0]}"',
                         GrantFullControl=f'id="{ALICE[0]}"', GrantRead=f'id="{BOB[0]}"')
    bobs = bob.create_multipart_upload(Bucket="uploads", Key="from-bob")["UploadId"]
    alices = alice.create_multipart_upload(Bucket="uploads", Key="from-alice")["UploadId"]
    for lister in (alice, bob):
        listed = {u["UploadId"]: (u["Initiator"]["ID"], u["Owner"]["ID"])
                  for u in lister.list_multipart_uploads(Bucket="uploads")["Uploads"]}
        assert listed == {bobs: (BOB[0], BOB[0]), alices: (ALICE[0], ALICE[0])}
    parts = bob.list_parts(Bucket="uploads", Key="from-bob", UploadId=bobs)
    assert (parts["Initiator"]["ID"], parts["Owner"]["ID"]) == (BOB[0], BOB[0])
    parts = alice.list_parts(Bucket="uploads", Key="from-alice", UploadId=alices)
    assert (parts["Initiator"]["ID"], parts["Owner"]["ID"]) == (ALICE[0], ALICE[0])


def test_in_an_enforced_bucket_an_upload_names_its_initiator_and_the_bucket_owner(server):
    """With BucketOwnerEnforced the bucket owner owns every object, but the Initiator is still the
    user who started the upload (it was shown as the bucket owner); what records it never reaches the
    object."""
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="enforced", ObjectOwnership="BucketOwnerEnforced")
    alice.put_bucket_policy(Bucket="enforced", Policy=policy(
        allow({"AWS": BOB[0]}, ["s3:PutObject", "s3:GetObject", "s3:ListMultipartUploadParts"],
              "arn:aws:s3:::enforced/*")))
    bobs = bob.create_multipart_upload(Bucket="enforced", Key="from-bob")["UploadId"]
    listed = {u["UploadId"]: (u["Initiator"]["ID"], u["Owner"]["ID"])
              for u in alice.list_multipart_uploads(Bucket="enforced")["Uploads"]}
    assert listed == {bobs: (BOB[0], ALICE[0])}
    parts = bob.list_parts(Bucket="enforced", Key="from-bob", UploadId=bobs)
    assert (parts["Initiator"]["ID"], parts["Owner"]["ID"]) == (BOB[0], ALICE[0])
    etag = bob.upload_part(Bucket="enforced", Key="from-bob", UploadId=bobs, PartNumber=1,
                           Body=b"bob's bytes")["ETag"]
    bob.complete_multipart_upload(Bucket="enforced", Key="from-bob", UploadId=bobs,
                                  MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    got = alice.get_object(Bucket="enforced", Key="from-bob")
    assert got["Body"].read() == b"bob's bytes"
    headers = got["ResponseMetadata"]["HTTPHeaders"]
    assert not [h for h in headers if "initiator" in h], headers
