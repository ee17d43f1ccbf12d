"""Users and bucket ownership (docs/security.md, "Users"): the root user manages users through the admin
API; each user owns the buckets it creates and may act on no other, with every refusal a 403 as S3
gives another account's bucket; users are durable (restart, SIGKILL) and a removed user's key stops
working at once."""

import hashlib
from xml.etree import ElementTree

import pytest
import requests
from botocore.exceptions import ClientError

import s3util
from conftest import make_client

ALICE = ("ALICEACCESSKEY0001", "alice-secret-key-0001")
BOB = ("BOBACCESSKEY000001", "bob-secret-key-000001")


def error_of(call):
    with pytest.raises(ClientError) as e:
        call()
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def admin(server, method, query, body=b"", creds=None):
    creds = creds or server.credentials
    signed = s3util.sign_headers(creds, method, server.host, "/", query=query,
                                 payload_hash=hashlib.sha256(body).hexdigest())
    url = f"{server.endpoint}/?" + "&".join(f"{k}={s3util.uri_encode(v)}" for k, v in query)
    return requests.request(method, url, data=body, headers=signed.headers, timeout=10)


def add_user(server, user):
    answer = admin(server, "PUT", [("fjord-admin-user", user[0])], user[1].encode())
    assert answer.status_code == 200, answer.text


def users_of(server):
    answer = admin(server, "GET", [("fjord-admin-users", "")])
    assert answer.status_code == 200, answer.text
    return [e.text for e in ElementTree.fromstring(answer.content).iter()
            if e.tag.endswith("AccessKey")]


def client_of(server, user):
    return make_client(server, access_key=user[0], secret_key=user[1])


@pytest.fixture
def server(make_server):
    s = make_server()
    add_user(s, ALICE)
    add_user(s, BOB)
    return s


def test_recreating_ones_own_bucket_outside_us_east_1_is_an_error(make_server):
    region = "eu-central-1"
    s = make_server(extra_args=["--region", region])
    s3 = make_client(s, region_name=region)
    s3.create_bucket(Bucket="mine", CreateBucketConfiguration={"LocationConstraint": region})
    assert error_of(lambda: s3.create_bucket(
        Bucket="mine", CreateBucketConfiguration={"LocationConstraint": region})) == ("BucketAlreadyOwnedByYou", 409)


def test_admin_api_is_root_only_and_checks_its_input(server):
    assert sorted(users_of(server)) == sorted([ALICE[0], BOB[0]])
    assert ALICE[1] not in admin(server, "GET", [("fjord-admin-users", "")]).text
    alice_creds = s3util.Credentials(ALICE[0], ALICE[1])
    refused = admin(server, "PUT", [("fjord-admin-user", "MALLORY00000001")], b"mallory-secret-1",
                    creds=alice_creds)
    assert refused.status_code == 403 and "AccessDenied" in refused.text
    assert admin(server, "PUT", [("fjord-admin-user", "SHORTSECRET0001")], b"short").status_code == 400
    root = admin(server, "PUT", [("fjord-admin-user", server.access_key)], b"another-secret-key")
    assert root.status_code == 400, "the root user is not managed here"
    assert admin(server, "GET", [("fjord-admin-users", "")], creds=alice_creds).status_code == 403


def test_buckets_belong_to_their_creator(server):
    alice, bob, root = client_of(server, ALICE), client_of(server, BOB), server.client()
    alice.create_bucket(Bucket="alice-data")
    alice.put_object(Bucket="alice-data", Key="w.pt", Body=b"weights")
    assert error_of(lambda: bob.create_bucket(Bucket="alice-data")) == ("BucketAlreadyExists", 409)
    # In us-east-1 S3 answers a re-creation of one's own bucket with 200 (legacy compatibility)
    alice.create_bucket(Bucket="alice-data")
    assert alice.get_object(Bucket="alice-data", Key="w.pt")["Body"].read() == b"weights"
    assert error_of(lambda: root.create_bucket(Bucket="alice-data")) == ("BucketAlreadyExists", 409)
    bob.create_bucket(Bucket="bob-data")
    assert [b["Name"] for b in alice.list_buckets()["Buckets"]] == ["alice-data"]
    assert [b["Name"] for b in bob.list_buckets()["Buckets"]] == ["bob-data"]
    assert {"alice-data", "bob-data"} <= {b["Name"] for b in root.list_buckets()["Buckets"]}
    assert ".fjord-system" not in {b["Name"] for b in root.list_buckets()["Buckets"]}
    # Root may act on every bucket
    assert root.get_object(Bucket="alice-data", Key="w.pt")["Body"].read() == b"weights"


def test_another_users_bucket_is_refused_everywhere(server):
    alice, bob = client_of(server, ALICE), client_of(server, BOB)
    alice.create_bucket(Bucket="private")
    alice.put_object(Bucket="private", Key="k", Body=b"secret data")
    bob.create_bucket(Bucket="bobs")
    calls = [lambda: bob.get_object(Bucket="private", Key="k"),
             lambda: bob.head_object(Bucket="private", Key="k"),
             lambda: bob.put_object(Bucket="private", Key="k", Body=b"overwrite"),
             lambda: bob.delete_object(Bucket="private", Key="k"),
             lambda: bob.list_objects_v2(Bucket="private"),
             lambda: bob.delete_bucket(Bucket="private"),
             lambda: bob.put_bucket_versioning(Bucket="private",
                                               VersioningConfiguration={"Status": "Enabled"}),
             lambda: bob.copy_object(Bucket="bobs", Key="stolen",
                                     CopySource={"Bucket": "private", "Key": "k"}),
             lambda: bob.create_multipart_upload(Bucket="private", Key="m")]
    for call in calls + [lambda: bob.head_bucket(Bucket="private")]:
        assert error_of(call)[1] == 403
    assert error_of(lambda: bob.get_object(Bucket="private", Key="k"))[0] == "AccessDenied"
    # A presigned URL made by a user without the permission is refused too
    signer = make_client(server, access_key=BOB[0], secret_key=BOB[1], signature_version="s3v4")
    url = signer.generate_presigned_url("get_object", Params={"Bucket": "private", "Key": "k"})
    assert requests.get(url, timeout=10).status_code == 403
    # A missing bucket is still NoSuchBucket, and the system bucket is nobody's to reach
    assert error_of(lambda: bob.list_objects_v2(Bucket="no-such-bucket-here"))[0] == "NoSuchBucket"
    assert error_of(lambda: server.client().list_objects_v2(Bucket=".fjord-system"))[1] in (400, 403)
    assert alice.get_object(Bucket="private", Key="k")["Body"].read() == b"secret data"


def test_expected_bucket_owner_names_the_owner(server):
    alice = client_of(server, ALICE)
    alice.create_bucket(Bucket="owned")
    alice.list_objects_v2(Bucket="owned", ExpectedBucketOwner=ALICE[0])
    assert error_of(lambda: alice.list_objects_v2(Bucket="owned", ExpectedBucketOwner=BOB[0])) == \
        ("AccessDenied", 403)


def test_users_survive_restart_and_sigkill_and_removal_takes_effect(server):
    alice = client_of(server, ALICE)
    alice.create_bucket(Bucket="kept")
    server.restart()
    alice = client_of(server, ALICE)
    alice.put_object(Bucket="kept", Key="a", Body=b"1")
    assert admin(server, "DELETE", [("fjord-admin-user", BOB[0])]).status_code == 204
    server.kill()  # acknowledged means durable
    server.start()
    assert users_of(server) == [ALICE[0]]
    assert client_of(server, ALICE).get_object(Bucket="kept", Key="a")["Body"].read() == b"1"
    assert error_of(lambda: client_of(server, BOB).list_buckets())[0] == "InvalidAccessKeyId"
    assert error_of(lambda: client_of(server, BOB).list_objects_v2(Bucket="kept"))[1] == 403


def test_fjord_admin_cli(server):
    import subprocess
    from conftest import binary_path, _scrub_environment
    env = _scrub_environment(dict(__import__("os").environ))
    env.update({"FJORD_ACCESS_KEY": server.access_key, "FJORD_SECRET_KEY": server.secret_key})

    def fjord_admin(*args, secret=None):
        return subprocess.run([str(binary_path()), "admin", "user", *args, "--endpoint", server.endpoint],
                              input=(secret or "").encode(), capture_output=True, env=env, timeout=30)

    added = fjord_admin("add", "CAROLACCESSKEY0001", secret="carol-secret-key-0001\n")
    assert added.returncode == 0, added.stderr
    listed = fjord_admin("ls")
    assert listed.stdout.decode().split() == sorted([ALICE[0], BOB[0], "CAROLACCESSKEY0001"])
    assert b"carol-secret" not in listed.stdout + listed.stderr
    carol = make_client(server, access_key="CAROLACCESSKEY0001", secret_key="carol-secret-key-0001")
    carol.create_bucket(Bucket="carols")
    assert fjord_admin("rm", "CAROLACCESSKEY0001").returncode == 0
    assert error_of(lambda: carol.list_buckets())[0] == "InvalidAccessKeyId"
    # Without a secret on stdin, or signed by a user who is not root: refused
    assert fjord_admin("add", "DAVEACCESSKEY00001").returncode == 2
    env.update({"FJORD_ACCESS_KEY": ALICE[0], "FJORD_SECRET_KEY": ALICE[1]})
    refused = fjord_admin("ls")
    assert refused.returncode == 1 and b"Access Denied" in refused.stderr


def test_a_removed_users_key_is_never_given_out_again(server):
    """A removed user's buckets (and any grant or policy naming its key) stay; a new user with the same
    key would inherit them, so the key is retired, across a restart too."""
    alice = client_of(server, ALICE)
    alice.create_bucket(Bucket="alices")
    alice.put_object(Bucket="alices", Key="private", Body=b"hers")
    assert admin(server, "DELETE", [("fjord-admin-user", ALICE[0])]).status_code == 204
    for attempt in range(2):
        again = admin(server, "PUT", [("fjord-admin-user", ALICE[0])], b"another-secret-for-alice")
        assert again.status_code == 400, again.text
        assert ALICE[0] not in users_of(server)
        assert error_of(lambda: client_of(server, ALICE).get_object(Bucket="alices", Key="private"))[0] == \
            "InvalidAccessKeyId"
        server.restart()
    # Root still has the bucket; another key is a new user with nothing
    assert server.client().get_object(Bucket="alices", Key="private")["Body"].read() == b"hers"
    add_user(server, ("CAROLACCESSKEY0001", "carol-secret-key-0001"))
    carol = client_of(server, ("CAROLACCESSKEY0001", "carol-secret-key-0001"))
    assert error_of(lambda: carol.get_object(Bucket="alices", Key="private"))[1] == 403
    # Changing a live user's secret is not a re-creation
    assert admin(server, "PUT", [("fjord-admin-user", BOB[0])], b"bob-new-secret-000001").status_code == 200
