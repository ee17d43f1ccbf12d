"""ACLs on buckets whose Object Ownership enables them (ObjectWriter, the default, and
BucketOwnerPreferred), as S3 has them: Get/Put/DeleteBucketOwnershipControls, canned ACLs and grants on
buckets and objects, who each reaches (anonymous, other users, the authenticated group), a policy's Deny
over an ACL's Allow, object ownership by the writer, and every refusal. boto3, the aws CLI, s3cmd and
rclone. (BucketOwnerEnforced: test_acl.py.)"""

import json

import pytest
import requests
from botocore.exceptions import ClientError

from conftest import make_client, make_kv_bucket, unique_bucket_name
from test_users import ALICE, BOB, add_user, client_of

CAROL = ("CAROLACCESSKEY0001", "carol-secret-key-001")
ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTHENTICATED = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"


def error_of(call):
    with pytest.raises(ClientError) as e:
        call()
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def anonymous(server, method, path, **kwargs):
    return requests.request(method, f"{server.endpoint}{path}", timeout=10, **kwargs)


def grants_of(acl):
    out = set()
    for g in acl["Grants"]:
        who = g["Grantee"].get("ID") or g["Grantee"].get("URI")
        out.add((who, g["Permission"]))
    return out


@pytest.fixture
def server(make_server):
    s = make_server()
    for user in (ALICE, BOB, CAROL):
        add_user(s, user)
    return s


def test_ownership_controls_round_trip(s3):
    name = unique_bucket_name("own")
    s3.create_bucket(Bucket=name, ObjectOwnership="ObjectWriter")
    try:
        rules = lambda: s3.get_bucket_ownership_controls(Bucket=name)["OwnershipControls"]["Rules"]
        assert rules() == [{"ObjectOwnership": "ObjectWriter"}]
        s3.put_bucket_ownership_controls(
            Bucket=name, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerPreferred"}]})
        assert rules() == [{"ObjectOwnership": "BucketOwnerPreferred"}]
        s3.delete_bucket_ownership_controls(Bucket=name)
        assert error_of(rules) == ("OwnershipControlsNotFoundError", 404)
        # Without controls the bucket keeps ACLs, as S3's older buckets do
        s3.put_bucket_acl(Bucket=name, ACL="public-read")
        # BucketOwnerEnforced is refused while the bucket's ACL grants others, taken once it does not
        enforce = lambda: s3.put_bucket_ownership_controls(
            Bucket=name, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
        assert error_of(enforce) == ("InvalidBucketAclWithObjectOwnership", 400)
        s3.put_bucket_acl(Bucket=name, ACL="private")
        enforce()
        assert rules() == [{"ObjectOwnership": "BucketOwnerEnforced"}]
        assert error_of(lambda: s3.put_bucket_acl(Bucket=name, ACL="public-read")) == \
            ("AccessControlListNotSupported", 400)
        assert error_of(lambda: s3.put_bucket_ownership_controls(
            Bucket=name, OwnershipControls={"Rules": [{"ObjectOwnership": "Anyone"}]}))[1] == 400
    finally:
        s3.delete_bucket(Bucket=name)
    assert error_of(lambda: s3.create_bucket(Bucket=unique_bucket_name("bad"),
                                             ObjectOwnership="Whoever"))[0] == "InvalidArgument"


def test_new_buckets_have_private_acls_unless_the_server_enforces_bucket_ownership(server, make_server):
    s3 = server.client()
    s3.create_bucket(Bucket="plain")
    rules = s3.get_bucket_ownership_controls(Bucket="plain")["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "ObjectWriter"}]
    owner = s3.list_buckets()["Owner"]["ID"]
    assert grants_of(s3.get_bucket_acl(Bucket="plain")) == {(owner, "FULL_CONTROL")}
    s3.put_object(Bucket="plain", Key="k", Body=b"x")
    assert grants_of(s3.get_object_acl(Bucket="plain", Key="k")) == {(owner, "FULL_CONTROL")}
    # ACLs enabled is not open: nobody else reads or lists until granted
    assert anonymous(server, "GET", "/plain/k").status_code == 403
    assert anonymous(server, "GET", "/plain?list-type=2").status_code == 403
    alice = client_of(server, ALICE)
    assert error_of(lambda: alice.get_object(Bucket="plain", Key="k"))[1] == 403
    s3.put_object(Bucket="plain", Key="open", Body=b"open", ACL="public-read")
    assert anonymous(server, "GET", "/plain/open").content == b"open"

    # KV buckets keep no ACLs, whatever the default
    assert error_of(lambda: make_kv_bucket(s3, "kvpub", acl="public-read")) == \
        ("InvalidBucketAclWithObjectOwnership", 400)
    assert error_of(lambda: make_kv_bucket(s3, "kvpub", acl="public-read", ownership="ObjectWriter")) == \
        ("InvalidBucketAclWithObjectOwnership", 400)
    make_kv_bucket(s3, "kvplain", acl="private", capacity_bytes=64 << 20)
    rules = s3.get_bucket_ownership_controls(Bucket="kvplain")["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]

    enforcing = make_server(["--object-ownership", "BucketOwnerEnforced"]).client()
    enforcing.create_bucket(Bucket="plain")
    rules = enforcing.get_bucket_ownership_controls(Bucket="plain")["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    assert error_of(lambda: enforcing.put_object(Bucket="plain", Key="k", Body=b"x", ACL="public-read")) == \
        ("AccessControlListNotSupported", 400)


def test_a_public_read_bucket_and_object_are_read_anonymously_and_nothing_more(server):
    s3 = server.client()
    s3.create_bucket(Bucket="pub", ObjectOwnership="ObjectWriter", ACL="public-read")
    owner = s3.list_buckets()["Owner"]["ID"]
    assert grants_of(s3.get_bucket_acl(Bucket="pub")) == {(owner, "FULL_CONTROL"), (ALL_USERS, "READ")}
    s3.put_object(Bucket="pub", Key="open.txt", Body=b"open", ACL="public-read")
    s3.put_object(Bucket="pub", Key="closed.txt", Body=b"closed")
    listing = anonymous(server, "GET", "/pub?list-type=2")
    assert listing.status_code == 200 and "open.txt" in listing.text and "closed.txt" in listing.text
    got = anonymous(server, "GET", "/pub/open.txt")
    assert got.status_code == 200 and got.content == b"open"
    assert anonymous(server, "HEAD", "/pub/open.txt").status_code == 200
    assert anonymous(server, "GET", "/pub/closed.txt").status_code == 403
    # The bucket lets anyone list, so a missing key is a 404 to anyone
    assert anonymous(server, "GET", "/pub/missing.txt").status_code == 404
    assert anonymous(server, "PUT", "/pub/new.txt", data=b"x").status_code == 403
    assert anonymous(server, "DELETE", "/pub/open.txt").status_code == 403
    assert anonymous(server, "GET", "/pub/open.txt?acl").status_code == 403  # READ is not READ_ACP
    assert anonymous(server, "PUT", "/pub?acl", headers={"x-amz-acl": "public-read-write"}).status_code == 403
    assert s3.get_object(Bucket="pub", Key="open.txt")["Body"].read() == b"open"


def test_public_read_write_bucket_takes_anonymous_writes(server):
    s3 = server.client()
    s3.create_bucket(Bucket="drop", ObjectOwnership="ObjectWriter", ACL="public-read-write")
    assert anonymous(server, "PUT", "/drop/dropped.txt", data=b"dropped").status_code == 200
    # An anonymous writer's object is the bucket owner's
    assert s3.get_object(Bucket="drop", Key="dropped.txt")["Body"].read() == b"dropped"
    assert anonymous(server, "GET", "/drop/dropped.txt").status_code == 403  # private to its owner
    assert anonymous(server, "DELETE", "/drop/dropped.txt").status_code == 204
    assert error_of(lambda: s3.head_object(Bucket="drop", Key="dropped.txt"))[1] == 404


def test_grants_reach_exactly_their_grantees(server):
    alice, bob, carol = (client_of(server, u) for u in (ALICE, BOB, CAROL))
    alice.create_bucket(Bucket="shared", ObjectOwnership="BucketOwnerPreferred")
    alice.put_object(Bucket="shared", Key="for-bob", Body=b"b", GrantRead=f'id="{BOB[0]}"')
    alice.put_object(Bucket="shared", Key="for-members", Body=b"m", GrantRead=f'uri="{AUTHENTICATED}"')
    assert bob.get_object(Bucket="shared", Key="for-bob")["Body"].read() == b"b"
    assert error_of(lambda: carol.get_object(Bucket="shared", Key="for-bob")) == ("AccessDenied", 403)
    assert carol.get_object(Bucket="shared", Key="for-members")["Body"].read() == b"m"
    assert anonymous(server, "GET", "/shared/for-members").status_code == 403
    # Bob may read the object, not list the bucket, write into it, or read the ACL
    assert error_of(lambda: bob.list_objects_v2(Bucket="shared")) == ("AccessDenied", 403)
    assert error_of(lambda: bob.put_object(Bucket="shared", Key="x", Body=b"x")) == ("AccessDenied", 403)
    assert error_of(lambda: bob.get_object_acl(Bucket="shared", Key="for-bob")) == ("AccessDenied", 403)
    # Grants on the bucket: Bob lists, Carol writes and reads the bucket's ACL
    alice.put_bucket_acl(Bucket="shared", GrantRead=f'id="{BOB[0]}"',
                         GrantWrite=f'id="{CAROL[0]}"', GrantReadACP=f'id="{CAROL[0]}"',
                         GrantFullControl=f'id="{ALICE[0]}"')
    assert [o["Key"] for o in bob.list_objects_v2(Bucket="shared")["Contents"]] == ["for-bob", "for-members"]
    carol.put_object(Bucket="shared", Key="from-carol", Body=b"c")
    assert (CAROL[0], "WRITE") in grants_of(carol.get_bucket_acl(Bucket="shared"))
    assert error_of(lambda: carol.put_bucket_acl(Bucket="shared", ACL="public-read")) == ("AccessDenied", 403)
    assert error_of(lambda: bob.put_object(Bucket="shared", Key="y", Body=b"y")) == ("AccessDenied", 403)
    assert error_of(lambda: carol.list_objects_v2(Bucket="shared")) == ("AccessDenied", 403)


def test_bucket_permissions_come_from_the_bucket_acl_for_its_owner_too(server):
    alice = client_of(server, ALICE)
    alice.create_bucket(Bucket="bare", ObjectOwnership="ObjectWriter")
    alice.put_object(Bucket="bare", Key="k", Body=b"k")
    acl = alice.get_bucket_acl(Bucket="bare")
    alice.put_bucket_acl(Bucket="bare", AccessControlPolicy={"Owner": acl["Owner"], "Grants": []})
    assert error_of(lambda: alice.put_object(Bucket="bare", Key="x", Body=b"x")) == ("AccessDenied", 403)
    assert error_of(lambda: alice.list_objects_v2(Bucket="bare")) == ("AccessDenied", 403)
    assert alice.get_object(Bucket="bare", Key="k")["Body"].read() == b"k"  # the object's ACL is its own
    assert alice.get_bucket_acl(Bucket="bare")["Grants"] == []
    alice.put_bucket_acl(Bucket="bare", ACL="private")  # the owner can always restore it
    alice.put_object(Bucket="bare", Key="x", Body=b"x")


def test_object_writer_owns_what_it_writes(server):
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="inbox", ObjectOwnership="ObjectWriter")
    alice.put_bucket_acl(Bucket="inbox", GrantWrite=f'id="{BOB[0]}"', GrantFullControl=f'id="{ALICE[0]}"')
    bob.put_object(Bucket="inbox", Key="report", Body=b"bob's")
    acl = bob.get_object_acl(Bucket="inbox", Key="report")
    assert acl["Owner"]["ID"] == BOB[0] and grants_of(acl) == {(BOB[0], "FULL_CONTROL")}
    # The bucket owner may delete it but not read it until Bob grants it
    assert error_of(lambda: alice.get_object(Bucket="inbox", Key="report")) == ("AccessDenied", 403)
    assert error_of(lambda: alice.get_object_acl(Bucket="inbox", Key="report")) == ("AccessDenied", 403)
    bob.put_object_acl(Bucket="inbox", Key="report", ACL="bucket-owner-full-control")
    assert alice.get_object(Bucket="inbox", Key="report")["Body"].read() == b"bob's"
    assert grants_of(alice.get_object_acl(Bucket="inbox", Key="report")) == \
        {(BOB[0], "FULL_CONTROL"), (ALICE[0], "FULL_CONTROL")}
    bob.put_object(Bucket="inbox", Key="gift", Body=b"g", ACL="bucket-owner-read")
    assert alice.get_object(Bucket="inbox", Key="gift")["Body"].read() == b"g"
    alice.delete_object(Bucket="inbox", Key="gift")
    assert error_of(lambda: alice.head_object(Bucket="inbox", Key="gift"))[1] == 404
    # BucketOwnerPreferred: an object given with bucket-owner-full-control becomes the bucket owner's
    alice.put_bucket_ownership_controls(
        Bucket="inbox", OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerPreferred"}]})
    bob.put_object(Bucket="inbox", Key="handed-over", Body=b"h", ACL="bucket-owner-full-control")
    assert alice.get_object_acl(Bucket="inbox", Key="handed-over")["Owner"]["ID"] == ALICE[0]
    bob.put_object(Bucket="inbox", Key="kept", Body=b"k")
    assert bob.get_object_acl(Bucket="inbox", Key="kept")["Owner"]["ID"] == BOB[0]
    # Enforcing bucket ownership again ignores the objects' ACLs: the bucket owner reads everything
    alice.put_bucket_acl(Bucket="inbox", ACL="private")
    alice.put_bucket_ownership_controls(
        Bucket="inbox", OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
    assert alice.get_object(Bucket="inbox", Key="kept")["Body"].read() == b"k"
    assert alice.get_object_acl(Bucket="inbox", Key="kept")["Owner"]["ID"] == ALICE[0]
    assert error_of(lambda: bob.get_object(Bucket="inbox", Key="kept")) == ("AccessDenied", 403)


def test_a_write_grant_cannot_erase_history(server):
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="history", ObjectOwnership="ObjectWriter")
    alice.put_bucket_versioning(Bucket="history", VersioningConfiguration={"Status": "Enabled"})
    alice.put_bucket_acl(Bucket="history", GrantWrite=f'id="{BOB[0]}"', GrantFullControl=f'id="{ALICE[0]}"')
    version = alice.put_object(Bucket="history", Key="ckpt", Body=b"step-1")["VersionId"]
    bob.delete_object(Bucket="history", Key="ckpt")  # a delete marker, which hides but keeps
    assert error_of(lambda: bob.delete_object(Bucket="history", Key="ckpt", VersionId=version)) == \
        ("AccessDenied", 403)
    deleted = bob.delete_objects(Bucket="history", Delete={"Objects": [{"Key": "ckpt", "VersionId": version}]})
    assert [e["Code"] for e in deleted.get("Errors", [])] == ["AccessDenied"]
    assert alice.get_object(Bucket="history", Key="ckpt", VersionId=version)["Body"].read() == b"step-1"


def test_a_policy_deny_wins_over_an_acl_allow(server):
    s3 = server.client()
    alice = client_of(server, ALICE)
    alice.create_bucket(Bucket="denied", ObjectOwnership="ObjectWriter", ACL="public-read")
    alice.put_object(Bucket="denied", Key="secret/x", Body=b"x", ACL="public-read")
    alice.put_object(Bucket="denied", Key="open/y", Body=b"y", ACL="public-read")
    alice.put_bucket_policy(Bucket="denied", Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::denied/secret/*"}]}))
    assert anonymous(server, "GET", "/denied/secret/x").status_code == 403
    assert anonymous(server, "GET", "/denied/open/y").status_code == 200
    assert error_of(lambda: alice.get_object(Bucket="denied", Key="secret/x")) == ("AccessDenied", 403)
    assert s3.get_object(Bucket="denied", Key="secret/x")["Body"].read() == b"x"  # root is not bound


def test_presigned_urls_carry_only_their_signers_permissions(server):
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="signed", ObjectOwnership="ObjectWriter")
    alice.put_object(Bucket="signed", Key="bobs", Body=b"1", GrantRead=f'id="{BOB[0]}"')
    alice.put_object(Bucket="signed", Key="alices", Body=b"2")
    bob_v4 = make_client(server, access_key=BOB[0], secret_key=BOB[1], signature_version="s3v4")
    for key, status in (("bobs", 200), ("alices", 403)):
        url = bob_v4.generate_presigned_url("get_object", Params={"Bucket": "signed", "Key": key})
        assert requests.get(url, timeout=10).status_code == status
    put = bob_v4.generate_presigned_url("put_object", Params={"Bucket": "signed", "Key": "new"})
    assert requests.put(put, data=b"x", timeout=10).status_code == 403
    assert bob.get_object(Bucket="signed", Key="bobs")["Body"].read() == b"1"


def test_bad_acls_are_refused_and_change_nothing(server):
    s3 = server.client()
    s3.create_bucket(Bucket="strict", ObjectOwnership="ObjectWriter")
    s3.put_object(Bucket="strict", Key="k", Body=b"k")
    before = s3.get_object_acl(Bucket="strict", Key="k")
    assert error_of(lambda: s3.put_object_acl(Bucket="strict", Key="k", GrantRead='id="NOSUCHUSER0000001"')) == \
        ("InvalidArgument", 400)
    assert error_of(lambda: s3.put_object_acl(Bucket="strict", Key="k", GrantRead='emailAddress="a@b.c"')) == \
        ("UnresolvableGrantByEmailAddress", 400)
    assert error_of(lambda: s3.put_object(Bucket="strict", Key="k2", Body=b"x", ACL="public-read",
                                          GrantRead=f'id="{BOB[0]}"')) == ("InvalidRequest", 400)
    assert error_of(lambda: s3.head_object(Bucket="strict", Key="k2"))[1] == 404
    assert error_of(lambda: s3.put_bucket_acl(Bucket="strict", ACL="everyone"))[0] == "InvalidArgument"
    bad_permission = {"Owner": before["Owner"], "Grants": [
        {"Grantee": {"Type": "CanonicalUser", "ID": BOB[0]}, "Permission": "READ"}]}
    bad_permission["Grants"][0]["Permission"] = "EVERYTHING"
    assert error_of(lambda: s3.put_object_acl(Bucket="strict", Key="k", AccessControlPolicy=bad_permission)) == \
        ("MalformedACLError", 400)
    other_owner = {"Owner": {"ID": BOB[0]}, "Grants": []}
    assert error_of(lambda: s3.put_object_acl(Bucket="strict", Key="k", AccessControlPolicy=other_owner))[1] == 403
    assert s3.get_object_acl(Bucket="strict", Key="k")["Grants"] == before["Grants"]
    assert error_of(lambda: s3.get_object_acl(Bucket="strict", Key="missing"))[1] == 404


def test_acl_documents_round_trip_and_survive_a_restart(server):
    s3 = server.client()
    s3.create_bucket(Bucket="kept", ObjectOwnership="ObjectWriter")
    s3.put_object(Bucket="kept", Key="k", Body=b"k")
    acl = s3.get_object_acl(Bucket="kept", Key="k")
    policy = {"Owner": acl["Owner"], "Grants": acl["Grants"] + [
        {"Grantee": {"Type": "Group", "URI": ALL_USERS}, "Permission": "READ"},
        {"Grantee": {"Type": "CanonicalUser", "ID": CAROL[0]}, "Permission": "WRITE_ACP"}]}
    s3.put_object_acl(Bucket="kept", Key="k", AccessControlPolicy=policy)
    s3.put_bucket_acl(Bucket="kept", AccessControlPolicy={"Owner": acl["Owner"], "Grants": acl["Grants"] + [
        {"Grantee": {"Type": "Group", "URI": AUTHENTICATED}, "Permission": "READ"}]})
    expected_object = grants_of(s3.get_object_acl(Bucket="kept", Key="k"))
    expected_bucket = grants_of(s3.get_bucket_acl(Bucket="kept"))
    assert (ALL_USERS, "READ") in expected_object and (CAROL[0], "WRITE_ACP") in expected_object
    server.restart()
    s3 = server.client()
    assert grants_of(s3.get_object_acl(Bucket="kept", Key="k")) == expected_object
    assert grants_of(s3.get_bucket_acl(Bucket="kept")) == expected_bucket
    assert anonymous(server, "GET", "/kept/k").content == b"k"
    # Carol holds WRITE_ACP: she may take public read away
    carol = client_of(server, CAROL)
    carol.put_object_acl(Bucket="kept", Key="k", ACL="private")
    assert anonymous(server, "GET", "/kept/k").status_code == 403
    # A copy never keeps its source's ACL; multipart uploads take theirs at the start
    s3.put_object_acl(Bucket="kept", Key="k", ACL="public-read")
    s3.copy_object(Bucket="kept", Key="copy", CopySource={"Bucket": "kept", "Key": "k"})
    assert anonymous(server, "GET", "/kept/copy").status_code == 403
    upload = s3.create_multipart_upload(Bucket="kept", Key="mp", ACL="public-read")["UploadId"]
    part = s3.upload_part(Bucket="kept", Key="mp", UploadId=upload, PartNumber=1, Body=b"p")
    s3.complete_multipart_upload(Bucket="kept", Key="mp", UploadId=upload,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert anonymous(server, "GET", "/kept/mp").content == b"p"


def test_cli_tools_set_public_acls(fjord_server, s3, aws_cli, s3cmd, rclone, tmp_dir):
    name = unique_bucket_name("tools")
    s3.create_bucket(Bucket=name, ObjectOwnership="BucketOwnerPreferred")
    try:
        source = tmp_dir / "f.txt"
        source.write_bytes(b"tool data")
        aws_cli("s3", "cp", source, f"s3://{name}/aws.txt", "--acl", "public-read")
        s3cmd("put", "--acl-private", source, f"s3://{name}/s3cmd.txt")
        assert anonymous(fjord_server, "GET", f"/{name}/s3cmd.txt").status_code == 403
        s3cmd("setacl", "--acl-public", f"s3://{name}/s3cmd.txt")
        rclone("copyto", "--s3-acl", "public-read", source, f"fjord:{name}/rclone.txt")
        for key in ("aws.txt", "s3cmd.txt", "rclone.txt"):
            got = anonymous(fjord_server, "GET", f"/{name}/{key}")
            assert got.status_code == 200 and got.content == b"tool data", key
        assert "*anon*: READ" in s3cmd("info", f"s3://{name}/s3cmd.txt").stdout_text
        aws_cli("s3api", "put-object-acl", "--bucket", name, "--key", "aws.txt", "--acl", "private")
        assert anonymous(fjord_server, "GET", f"/{name}/aws.txt").status_code == 403
    finally:
        for o in s3.list_objects_v2(Bucket=name).get("Contents", []):
            s3.delete_object(Bucket=name, Key=o["Key"])
        s3.delete_bucket(Bucket=name)
