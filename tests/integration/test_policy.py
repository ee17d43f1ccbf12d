"""Bucket policies (docs/security.md, "Bucket policies"): Put/Get/DeleteBucketPolicy with boto3 and the
aws CLI, the JSON subset and its MalformedPolicy refusals, and every decision: anonymous requests allowed
exactly where a policy allows them, grants to another user by prefix, Deny over the owner's own access,
aws:SourceIp and s3:prefix conditions, and a missing key hidden from those who may not list."""

import hashlib
import json

import pytest
import requests
from botocore.exceptions import ClientError

import s3util
from conftest import make_client
from test_users import ALICE, BOB, add_user, client_of


def error_of(call):
    with pytest.raises(ClientError) as e:
        call()
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def policy(*statements):
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def allow(principal, actions, resources, **extra):
    return {"Effect": "Allow", "Principal": principal, "Action": actions, "Resource": resources, **extra}


@pytest.fixture
def server(make_server):
    s = make_server()
    add_user(s, ALICE)
    add_user(s, BOB)
    return s


def anonymous(server, method, path, **kwargs):
    return requests.request(method, f"{server.endpoint}{path}", timeout=10, **kwargs)


def test_policy_round_trip_and_malformed_policies(server):
    s3 = server.client()
    s3.create_bucket(Bucket="pol")
    assert error_of(lambda: s3.get_bucket_policy(Bucket="pol")) == ("NoSuchBucketPolicy", 404)
    doc = policy(allow("*", "s3:GetObject", "arn:aws:s3:::pol/*"))
    s3.put_bucket_policy(Bucket="pol", Policy=doc)
    assert json.loads(s3.get_bucket_policy(Bucket="pol")["Policy"]) == json.loads(doc)
    bad = ["not json",
           policy(allow("*", "s3:GetObject", "arn:aws:s3:::other-bucket/*")),
           policy({"Effect": "Allow", "NotPrincipal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::pol"}),
           policy(allow("*", "s3:GetObject", "arn:aws:s3:::pol/*",
                        Condition={"DateGreaterThan": {"aws:CurrentTime": "2020-01-01T00:00:00Z"}})),
           policy({"Effect": "Maybe", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::pol"}),
           policy(allow("*", "iam:PassRole", "arn:aws:s3:::pol"))]
    for text in bad:
        assert error_of(lambda: s3.put_bucket_policy(Bucket="pol", Policy=text)) == ("MalformedPolicy", 400), text
    s3.delete_bucket_policy(Bucket="pol")
    assert error_of(lambda: s3.get_bucket_policy(Bucket="pol"))[1] == 404


def test_anonymous_access_exactly_where_a_policy_allows_it(server):
    s3 = server.client()
    s3.create_bucket(Bucket="public")
    s3.put_object(Bucket="public", Key="datasets/a.bin", Body=b"open data")
    # Without a policy an anonymous request is refused; a missing bucket is still NoSuchBucket
    assert anonymous(server, "GET", "/public/datasets/a.bin").status_code == 403
    assert anonymous(server, "GET", "/no-such-bucket-anywhere/k").status_code == 404
    s3.put_bucket_policy(Bucket="public", Policy=policy(
        allow("*", "s3:GetObject", "arn:aws:s3:::public/datasets/*")))
    got = anonymous(server, "GET", "/public/datasets/a.bin")
    assert got.status_code == 200 and got.content == b"open data"
    assert anonymous(server, "PUT", "/public/datasets/b.bin", data=b"x").status_code == 403
    assert anonymous(server, "DELETE", "/public/datasets/a.bin").status_code == 403
    assert anonymous(server, "GET", "/public").status_code == 403  # listing is not granted
    assert anonymous(server, "GET", "/").status_code == 403
    assert anonymous(server, "PUT", "/anon-made-bucket").status_code == 403
    # A missing key is hidden (403) from whoever may not list, and 404 once listing is allowed
    missing = anonymous(server, "GET", "/public/datasets/missing")
    assert missing.status_code == 403 and "AccessDenied" in missing.text
    s3.put_bucket_policy(Bucket="public", Policy=policy(
        allow("*", ["s3:GetObject", "s3:GetObjectTagging"], "arn:aws:s3:::public/datasets/*")))
    assert anonymous(server, "GET", "/public/datasets/missing?tagging").status_code == 403
    s3.put_bucket_policy(Bucket="public", Policy=policy(
        allow("*", "s3:GetObject", "arn:aws:s3:::public/datasets/*"),
        allow("*", "s3:ListBucket", "arn:aws:s3:::public")))
    missing = anonymous(server, "GET", "/public/datasets/missing")
    assert missing.status_code == 404 and "NoSuchKey" in missing.text
    assert "datasets/a.bin" in anonymous(server, "GET", "/public?list-type=2").text


def test_a_grant_to_another_user_by_prefix(server):
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="team")
    alice.put_object(Bucket="team", Key="shared/ckpt.pt", Body=b"shared")
    alice.put_object(Bucket="team", Key="private/notes", Body=b"mine")
    alice.put_bucket_policy(Bucket="team", Policy=policy(
        allow({"AWS": [f"arn:aws:iam::000000000000:user/{BOB[0]}"]}, ["s3:GetObject"],
              "arn:aws:s3:::team/shared/*"),
        allow({"AWS": BOB[0]}, "s3:ListBucket", "arn:aws:s3:::team",
              Condition={"StringLike": {"s3:prefix": "shared/*"}})))
    assert bob.get_object(Bucket="team", Key="shared/ckpt.pt")["Body"].read() == b"shared"
    assert error_of(lambda: bob.get_object(Bucket="team", Key="private/notes")) == ("AccessDenied", 403)
    assert error_of(lambda: bob.put_object(Bucket="team", Key="shared/x", Body=b"x"))[1] == 403
    assert [o["Key"] for o in bob.list_objects_v2(Bucket="team", Prefix="shared/")["Contents"]] == \
        ["shared/ckpt.pt"]
    # The objects' owner in a listing is the bucket's owner, not whoever lists it
    listed = bob.list_objects_v2(Bucket="team", Prefix="shared/", FetchOwner=True)["Contents"]
    assert listed[0]["Owner"]["ID"] == ALICE[0]
    assert bob.list_objects(Bucket="team", Prefix="shared/")["Contents"][0]["Owner"]["ID"] == ALICE[0]
    assert error_of(lambda: bob.list_objects_v2(Bucket="team"))[1] == 403, "only under shared/"
    signer = make_client(server, access_key=BOB[0], secret_key=BOB[1], signature_version="s3v4")
    url = signer.generate_presigned_url("get_object", Params={"Bucket": "team", "Key": "shared/ckpt.pt"})
    assert requests.get(url, timeout=10).content == b"shared"
    # Bob still sees only his own buckets, and may not change Alice's policy
    assert bob.list_buckets()["Buckets"] == []
    assert error_of(lambda: bob.delete_bucket_policy(Bucket="team"))[1] == 403


def test_deny_wins_over_the_owner_and_over_allow(server):
    alice = client_of(server, ALICE)
    alice.create_bucket(Bucket="guarded")
    alice.put_object(Bucket="guarded", Key="ckpt/step-1", Body=b"keep")
    alice.put_bucket_policy(Bucket="guarded", Policy=policy(
        allow("*", "s3:*", "arn:aws:s3:::guarded/*"),
        {"Effect": "Deny", "Principal": "*", "Action": ["s3:DeleteObject*"],
         "Resource": "arn:aws:s3:::guarded/ckpt/*"}))
    assert error_of(lambda: alice.delete_object(Bucket="guarded", Key="ckpt/step-1")) == ("AccessDenied", 403)
    assert error_of(lambda: client_of(server, BOB).delete_object(Bucket="guarded", Key="ckpt/step-1"))[1] == 403
    assert client_of(server, BOB).get_object(Bucket="guarded", Key="ckpt/step-1")["Body"].read() == b"keep"
    # The root user is not bound by bucket policies (it can always repair one)
    server.client().delete_object(Bucket="guarded", Key="ckpt/step-1")


def test_source_ip_condition(server):
    s3 = server.client()
    s3.create_bucket(Bucket="bynet")
    s3.put_object(Bucket="bynet", Key="k", Body=b"v")
    s3.put_bucket_policy(Bucket="bynet", Policy=policy(
        allow("*", "s3:GetObject", "arn:aws:s3:::bynet/*",
              Condition={"IpAddress": {"aws:SourceIp": ["10.0.0.0/8", "192.168.0.0/16"]}})))
    assert anonymous(server, "GET", "/bynet/k").status_code == 403
    s3.put_bucket_policy(Bucket="bynet", Policy=policy(
        allow("*", "s3:GetObject", "arn:aws:s3:::bynet/*",
              Condition={"IpAddress": {"aws:SourceIp": "127.0.0.0/8"}})))
    assert anonymous(server, "GET", "/bynet/k").status_code == 200


def test_policies_survive_a_restart_and_the_aws_cli_sets_them(server, aws_cli, bucket):
    aws_cli("s3api", "put-bucket-policy", "--bucket", bucket, "--policy",
            policy(allow("*", "s3:GetObject", f"arn:aws:s3:::{bucket}/*")))
    got = json.loads(aws_cli("s3api", "get-bucket-policy", "--bucket", bucket).stdout_text)
    assert json.loads(got["Policy"])["Statement"][0]["Effect"] == "Allow"
    s3 = server.client()
    s3.create_bucket(Bucket="kept-policy")
    s3.put_object(Bucket="kept-policy", Key="k", Body=b"v")
    s3.put_bucket_policy(Bucket="kept-policy", Policy=policy(
        allow("*", "s3:GetObject", "arn:aws:s3:::kept-policy/*")))
    server.kill()
    server.start()
    assert anonymous(server, "GET", "/kept-policy/k").content == b"v"


def test_delete_objects_is_checked_key_by_key(server):
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="ckpts")
    for key in ["protected/step-1", "scratch/a", "scratch/b"]:
        alice.put_object(Bucket="ckpts", Key=key, Body=b"x")
    alice.put_bucket_policy(Bucket="ckpts", Policy=policy(
        allow({"AWS": BOB[0]}, "s3:DeleteObject", "arn:aws:s3:::ckpts/scratch/*"),
        {"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject",
         "Resource": "arn:aws:s3:::ckpts/protected/*"}))
    objects = [{"Key": k} for k in ["protected/step-1", "scratch/a"]]
    for who in (alice, bob):  # the Deny binds the owner too; Bob's grant covers scratch/ only
        answer = who.delete_objects(Bucket="ckpts", Delete={"Objects": objects})
        assert [e["Key"] for e in answer.get("Errors", [])] == ["protected/step-1"]
        assert answer["Errors"][0]["Code"] == "AccessDenied"
    answer = bob.delete_objects(Bucket="ckpts", Delete={"Objects": [{"Key": "scratch/b"}]})
    assert [d["Key"] for d in answer["Deleted"]] == ["scratch/b"]
    keys = [o["Key"] for o in alice.list_objects_v2(Bucket="ckpts")["Contents"]]
    assert keys == ["protected/step-1"]


def test_policy_changes_and_kv_batches_are_the_owners(server):
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="shared-all")
    alice.put_bucket_policy(Bucket="shared-all", Policy=policy(
        allow("*", "s3:*", ["arn:aws:s3:::shared-all", "arn:aws:s3:::shared-all/*"])))
    bob.put_object(Bucket="shared-all", Key="k", Body=b"granted")
    assert error_of(lambda: bob.put_bucket_policy(Bucket="shared-all", Policy=policy(
        allow("*", "s3:GetObject", "arn:aws:s3:::shared-all/*"))))[1] == 403
    assert error_of(lambda: bob.get_bucket_policy(Bucket="shared-all"))[1] == 403
    assert anonymous(server, "DELETE", "/shared-all?policy").status_code == 403
    assert error_of(lambda: bob.copy_object(Bucket="shared-all", Key="c",
                                            CopySource={"Bucket": "shared-all", "Key": "k"},
                                            ExpectedSourceBucketOwner=BOB[0]))[1] == 403
    bob.copy_object(Bucket="shared-all", Key="c", CopySource={"Bucket": "shared-all", "Key": "k"},
                    ExpectedSourceBucketOwner=ALICE[0])


def test_minio_bucket_policy(fjord_server, bucket):
    from minio import Minio
    client = Minio(fjord_server.host, access_key=fjord_server.access_key,
                   secret_key=fjord_server.secret_key, secure=False)
    client.put_object(bucket, "public/k", __import__("io").BytesIO(b"v"), 1)
    doc = policy(allow("*", "s3:GetObject", f"arn:aws:s3:::{bucket}/public/*"))
    client.set_bucket_policy(bucket, doc)
    assert json.loads(client.get_bucket_policy(bucket)) == json.loads(doc)
    assert requests.get(f"{fjord_server.endpoint}/{bucket}/public/k", timeout=10).content == b"v"
    client.delete_bucket_policy(bucket)
    assert requests.get(f"{fjord_server.endpoint}/{bucket}/public/k", timeout=10).status_code == 403


def test_hostile_forms_of_the_new_inputs(server):
    s3 = server.client()
    s3.create_bucket(Bucket="hostile")
    s3.put_object(Bucket="hostile", Key="k", Body=b"v")
    s3.put_bucket_versioning(Bucket="hostile", VersioningConfiguration={"Status": "Enabled"})
    # A versionId with CR/LF, NUL or an oversized number is refused, never echoed into a header
    for bad in ["%0d%0aX-Injected:%201", "%00", "9" * 400, "-1"]:
        signed = s3util.sign_headers(server.credentials, "GET", server.host, "/hostile/k",
                                     query=[("versionId", requests.utils.unquote(bad))])
        got = requests.get(f"{server.endpoint}/hostile/k?versionId={bad}", headers=signed.headers, timeout=10)
        assert got.status_code == 400 and "X-Injected" not in got.headers, bad
    # A policy that is not UTF-8, or holds a NUL in a resource: refused or kept exactly
    signed = s3util.sign_headers(server.credentials, "PUT", server.host, "/hostile", query=[("policy", "")],
                                 payload_hash=hashlib.sha256(b'{"Statement": "\xff"}').hexdigest())
    got = requests.put(f"{server.endpoint}/hostile?policy=", data=b'{"Statement": "\xff"}',
                       headers=signed.headers, timeout=10)
    assert got.status_code == 400 and "MalformedPolicy" in got.text
    # A lifecycle rule whose prefix refers to a character XML cannot carry
    body = (b"<LifecycleConfiguration><Rule><ID>x</ID><Filter><Prefix>a&#x0;b</Prefix></Filter>"
            b"<Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule></LifecycleConfiguration>")
    signed = s3util.sign_headers(server.credentials, "PUT", server.host, "/hostile", query=[("lifecycle", "")],
                                 payload_hash=hashlib.sha256(body).hexdigest())
    got = requests.put(f"{server.endpoint}/hostile?lifecycle=", data=body, headers=signed.headers, timeout=10)
    assert got.status_code == 400 and "MalformedXML" in got.text
    # An admin user key with CR/LF or a control character
    for key in ["BAD%0d%0aKEY00001", "BAD%01KEY000001"]:
        raw = requests.utils.unquote(key)
        signed = s3util.sign_headers(server.credentials, "PUT", server.host, "/", query=[("fjord-admin-user", raw)],
                                     payload_hash=hashlib.sha256(b"some-secret-key-1").hexdigest())
        got = requests.put(f"{server.endpoint}/?fjord-admin-user={key}", data=b"some-secret-key-1",
                           headers=signed.headers, timeout=10)
        assert got.status_code == 400, (key, got.text)


def test_a_policy_can_require_the_acl_and_headers_a_write_names(server):
    """The classic hand-over rule: writers must give the bucket owner full control (s3:x-amz-acl), and a
    ...IfExists condition that holds when the request lacks the key."""
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="handover", ObjectOwnership="ObjectWriter")
    alice.put_bucket_policy(Bucket="handover", Policy=policy(
        allow({"AWS": BOB[0]}, "s3:PutObject", "arn:aws:s3:::handover/*",
              Condition={"StringEquals": {"s3:x-amz-acl": "bucket-owner-full-control"}}),
        allow({"AWS": BOB[0]}, "s3:ListBucket", "arn:aws:s3:::handover",
              Condition={"StringLikeIfExists": {"s3:delimiter": "/"}})))
    assert error_of(lambda: bob.put_object(Bucket="handover", Key="a", Body=b"a"))[1] == 403
    assert error_of(lambda: bob.put_object(Bucket="handover", Key="a", Body=b"a", ACL="public-read"))[1] == 403
    bob.put_object(Bucket="handover", Key="a", Body=b"a", ACL="bucket-owner-full-control")
    assert alice.get_object(Bucket="handover", Key="a")["Body"].read() == b"a"
    assert [o["Key"] for o in bob.list_objects_v2(Bucket="handover")["Contents"]] == ["a"]
    bob.list_objects_v2(Bucket="handover", Delimiter="/")
    assert error_of(lambda: bob.list_objects_v2(Bucket="handover", Delimiter="-"))[1] == 403


def test_conditions_on_the_objects_own_tags(server):
    """s3:ExistingObjectTag/<tag>: decided on the tags the object has when the request reads it."""
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="tagged")
    for key, tags in (("open.bin", "security=public"), ("closed.bin", "security=secret"),
                      ("bare.bin", ""), ("draft.txt", "state=draft"), ("locked.bin", "hold=locked")):
        alice.put_object(Bucket="tagged", Key=key, Body=key.encode(), Tagging=tags)
    alice.put_bucket_policy(Bucket="tagged", Policy=policy(
        allow({"AWS": BOB[0]}, ["s3:GetObject", "s3:GetObjectTagging"], "arn:aws:s3:::tagged/*",
              Condition={"StringEquals": {"s3:ExistingObjectTag/security": "public"}}),
        allow({"AWS": BOB[0]}, "s3:PutObjectTagging", "arn:aws:s3:::tagged/*",
              Condition={"StringEquals": {"s3:ExistingObjectTag/state": "draft"}}),
        {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::tagged/*",
         "Condition": {"StringEquals": {"s3:ExistingObjectTag/hold": "locked"}}}))
    assert bob.get_object(Bucket="tagged", Key="open.bin")["Body"].read() == b"open.bin"
    assert bob.head_object(Bucket="tagged", Key="open.bin")["ContentLength"] == 8
    assert bob.get_object_tagging(Bucket="tagged", Key="open.bin")["TagSet"] == [
        {"Key": "security", "Value": "public"}]
    for key in ("closed.bin", "bare.bin", "missing.bin"):
        assert error_of(lambda: bob.get_object(Bucket="tagged", Key=key)) == ("AccessDenied", 403), key
        assert error_of(lambda: bob.get_object_tagging(Bucket="tagged", Key=key))[1] == 403, key
    # The tags at the time of the request decide: re-tagged, the object opens
    alice.put_object_tagging(Bucket="tagged", Key="closed.bin",
                             Tagging={"TagSet": [{"Key": "security", "Value": "public"}]})
    assert bob.get_object(Bucket="tagged", Key="closed.bin")["Body"].read() == b"closed.bin"
    # A tag-conditioned Deny binds the owner too; the owner's other objects stay its own
    assert error_of(lambda: alice.get_object(Bucket="tagged", Key="locked.bin")) == ("AccessDenied", 403)
    assert alice.get_object(Bucket="tagged", Key="bare.bin")["Body"].read() == b"bare.bin"
    # Bob may retag a draft once; after that it is no longer a draft
    final = {"TagSet": [{"Key": "state", "Value": "final"}]}
    bob.put_object_tagging(Bucket="tagged", Key="draft.txt", Tagging=final)
    assert error_of(lambda: bob.put_object_tagging(Bucket="tagged", Key="draft.txt", Tagging=final))[1] == 403
    assert error_of(lambda: bob.delete_object_tagging(Bucket="tagged", Key="draft.txt"))[1] == 403
    assert alice.get_object_tagging(Bucket="tagged", Key="draft.txt")["TagSet"] == final["TagSet"]
    # Other operations have no existing object to look at: the tag condition does not hold for them
    assert error_of(lambda: bob.put_object(Bucket="tagged", Key="open.bin", Body=b"x"))[1] == 403
    assert error_of(lambda: bob.get_object_acl(Bucket="tagged", Key="open.bin"))[1] == 403
