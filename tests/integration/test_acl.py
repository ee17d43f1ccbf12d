"""ACLs as S3 answers a BucketOwnerEnforced bucket (S3's default since 2023; Fjord's buckets are
ObjectWriter unless they name it or the server is told to, test_acl_grants.py): reading an ACL shows the
owner with FULL_CONTROL; writes and Put*Acl that would grant anything beyond the owner are refused
(AccessControlListNotSupported; InvalidBucketAclWithObjectOwnership at CreateBucket) and change nothing;
owner-only ACLs (private, bucket-owner-full-control) are accepted. boto3 and the aws CLI."""

import pytest
from botocore.exceptions import ClientError

from conftest import empty_and_delete_bucket, unique_bucket_name


def error_of(call):
    with pytest.raises(ClientError) as e:
        call()
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


@pytest.fixture
def bucket(s3, bucket_name):
    """A fresh BucketOwnerEnforced bucket, emptied and deleted afterwards."""
    s3.create_bucket(Bucket=bucket_name, ObjectOwnership="BucketOwnerEnforced")
    yield bucket_name
    empty_and_delete_bucket(s3, bucket_name)


def owner_only(acl, owner):
    assert acl["Owner"]["ID"] == owner
    assert [(g["Grantee"]["Type"], g["Grantee"]["ID"], g["Permission"]) for g in acl["Grants"]] == \
        [("CanonicalUser", owner, "FULL_CONTROL")]


def test_reading_acls_shows_the_owner_with_full_control(s3, bucket):
    owner = s3.list_buckets()["Owner"]["ID"]
    owner_only(s3.get_bucket_acl(Bucket=bucket), owner)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    owner_only(s3.get_object_acl(Bucket=bucket, Key="k"), owner)
    assert error_of(lambda: s3.get_object_acl(Bucket=bucket, Key="missing"))[1] == 404
    assert error_of(lambda: s3.get_bucket_acl(Bucket=unique_bucket_name("nope"))) == ("NoSuchBucket", 404)
    rules = s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]


def test_acls_granting_others_are_refused_and_change_nothing(s3, bucket):
    for acl in ("public-read", "public-read-write", "authenticated-read"):
        assert error_of(lambda: s3.put_object(Bucket=bucket, Key=f"pub-{acl}", Body=b"x", ACL=acl)) == \
            ("AccessControlListNotSupported", 400)
        assert error_of(lambda: s3.head_object(Bucket=bucket, Key=f"pub-{acl}"))[1] == 404
        assert error_of(lambda: s3.put_bucket_acl(Bucket=bucket, ACL=acl)) == \
            ("AccessControlListNotSupported", 400)
    assert error_of(lambda: s3.put_object(Bucket=bucket, Key="granted", Body=b"x",
                                          GrantRead='uri="http://acs.amazonaws.com/groups/global/AllUsers"')) == \
        ("AccessControlListNotSupported", 400)
    assert error_of(lambda: s3.create_multipart_upload(Bucket=bucket, Key="mp", ACL="public-read")) == \
        ("AccessControlListNotSupported", 400)
    s3.put_object(Bucket=bucket, Key="src", Body=b"x")
    assert error_of(lambda: s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"},
                                           ACL="public-read")) == ("AccessControlListNotSupported", 400)
    name = unique_bucket_name("public")
    assert error_of(lambda: s3.create_bucket(Bucket=name, ACL="public-read",
                                             ObjectOwnership="BucketOwnerEnforced")) == \
        ("InvalidBucketAclWithObjectOwnership", 400)
    assert error_of(lambda: s3.head_bucket(Bucket=name))[1] == 404
    owner_only(s3.get_bucket_acl(Bucket=bucket), s3.list_buckets()["Owner"]["ID"])


def test_owner_only_acls_are_accepted(s3, bucket):
    s3.put_object(Bucket=bucket, Key="a", Body=b"a", ACL="bucket-owner-full-control")
    s3.put_object(Bucket=bucket, Key="b", Body=b"b", ACL="private")  # rclone's default
    s3.put_bucket_acl(Bucket=bucket, ACL="private")
    s3.put_object_acl(Bucket=bucket, Key="a", ACL="bucket-owner-full-control")
    name = unique_bucket_name("private")
    s3.create_bucket(Bucket=name, ACL="private", ObjectOwnership="BucketOwnerEnforced")
    s3.delete_bucket(Bucket=name)


def test_aws_cli_public_read_upload_is_refused(aws_cli, bucket, tmp_dir):
    source = tmp_dir / "f"
    source.write_bytes(b"data")
    refused = aws_cli("s3", "cp", source, f"s3://{bucket}/f", "--acl", "public-read", check=False)
    assert refused.returncode != 0 and "AccessControlListNotSupported" in refused.stderr_text
    aws_cli("s3", "cp", source, f"s3://{bucket}/f", "--acl", "bucket-owner-full-control")
    assert "FULL_CONTROL" in aws_cli("s3api", "get-object-acl", "--bucket", bucket, "--key", "f").stdout_text


def test_an_acl_document_granting_only_the_owner_is_accepted(s3, bucket):
    """What s3cmd sends back when it copies an object: the ACL it read from the source."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    acl = s3.get_object_acl(Bucket=bucket, Key="k")
    s3.put_object_acl(Bucket=bucket, Key="k",
                      AccessControlPolicy={"Owner": acl["Owner"], "Grants": acl["Grants"]})
    public = acl["Grants"] + [{"Grantee": {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"},
                               "Permission": "READ"}]
    assert error_of(lambda: s3.put_object_acl(Bucket=bucket, Key="k", AccessControlPolicy={
        "Owner": acl["Owner"], "Grants": public})) == ("AccessControlListNotSupported", 400)
    other = [{"Grantee": {"Type": "CanonicalUser", "ID": "someone-else"}, "Permission": "READ"}]
    assert error_of(lambda: s3.put_bucket_acl(Bucket=bucket, AccessControlPolicy={
        "Owner": acl["Owner"], "Grants": other})) == ("AccessControlListNotSupported", 400)
