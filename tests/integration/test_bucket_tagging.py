"""PutBucketTagging / GetBucketTagging / DeleteBucketTagging with boto3 and the aws CLI: the tag set is
replaced whole, read back in order, NoSuchTagSet when there is none, S3's limits (50 tags, keys of 1-128
and values of at most 256 characters, no key twice), kept across a restart and a SIGKILL, gone with the
bucket; a KV bucket keeps no tags (NotImplemented)."""

import json

import pytest
from botocore.exceptions import ClientError

from conftest import make_kv_bucket, unique_bucket_name


def error_of(call):
    with pytest.raises(ClientError) as e:
        call()
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_bucket_tag_set_round_trip(s3, bucket):
    assert error_of(lambda: s3.get_bucket_tagging(Bucket=bucket)) == ("NoSuchTagSet", 404)
    tags = [{"Key": "team", "Value": "training"}, {"Key": "cost centre", "Value": ""},
            {"Key": "ünïcode/@:+-=._", "Value": "v" * 256}]
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tags})
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == tags
    replaced = [{"Key": "only", "Value": "one"}]
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": replaced})
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == replaced
    # Object tags are a different thing: untouched.
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", Tagging="a=b")
    assert s3.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == [{"Key": "a", "Value": "b"}]
    s3.delete_bucket_tagging(Bucket=bucket)
    assert error_of(lambda: s3.get_bucket_tagging(Bucket=bucket)) == ("NoSuchTagSet", 404)
    s3.delete_bucket_tagging(Bucket=bucket)  # deleting what is not there succeeds


def test_bucket_tags_are_checked(s3, bucket):
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "keep", "Value": "me"}]})
    bad = [
        [{"Key": "dup", "Value": "1"}, {"Key": "dup", "Value": "2"}],
        [{"Key": f"k{i}", "Value": "v"} for i in range(51)],
        [{"Key": "k" * 129, "Value": "v"}],
        [{"Key": "k", "Value": "v" * 257}],
    ]
    for tag_set in bad:
        assert error_of(lambda: s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tag_set})) == \
            ("InvalidTag", 400), tag_set
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == [{"Key": "keep", "Value": "me"}]
    fifty = [{"Key": f"k{i:02}", "Value": str(i)} for i in range(50)]
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": fifty})
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == fifty
    missing = unique_bucket_name("missing")
    assert error_of(lambda: s3.put_bucket_tagging(
        Bucket=missing, Tagging={"TagSet": [{"Key": "a", "Value": "b"}]})) == ("NoSuchBucket", 404)
    assert error_of(lambda: s3.get_bucket_tagging(Bucket=missing)) == ("NoSuchBucket", 404)


def test_bucket_tags_survive_restart_and_sigkill_and_go_with_the_bucket(make_server):
    server = make_server()
    s3 = server.client()
    s3.create_bucket(Bucket="tagged")
    tags = [{"Key": "run", "Value": "llama3-8b"}, {"Key": "step", "Value": "100"}]
    s3.put_bucket_tagging(Bucket="tagged", Tagging={"TagSet": tags})
    server.restart()
    s3 = server.client()
    assert s3.get_bucket_tagging(Bucket="tagged")["TagSet"] == tags
    s3.put_bucket_tagging(Bucket="tagged", Tagging={"TagSet": tags[:1]})
    server.kill()  # acknowledged means durable: SIGKILL right after the answer
    server.start()
    s3 = server.client()
    assert s3.get_bucket_tagging(Bucket="tagged")["TagSet"] == tags[:1]
    s3.delete_bucket(Bucket="tagged")
    s3.create_bucket(Bucket="tagged")
    assert error_of(lambda: s3.get_bucket_tagging(Bucket="tagged")) == ("NoSuchTagSet", 404)


def test_aws_cli_bucket_tagging(aws_cli, bucket):
    aws_cli("s3api", "put-bucket-tagging", "--bucket", bucket, "--tagging",
            json.dumps({"TagSet": [{"Key": "owner", "Value": "ml-infra"}]}))
    got = json.loads(aws_cli("s3api", "get-bucket-tagging", "--bucket", bucket).stdout_text)
    assert got["TagSet"] == [{"Key": "owner", "Value": "ml-infra"}]
    aws_cli("s3api", "delete-bucket-tagging", "--bucket", bucket)
    refused = aws_cli("s3api", "get-bucket-tagging", "--bucket", bucket, check=False)
    assert refused.returncode != 0 and "NoSuchTagSet" in refused.stderr_text


def test_kv_bucket_keeps_no_tags(s3):
    name = unique_bucket_name("kv-tags")
    make_kv_bucket(s3, name, capacity_bytes=64 * 1024 * 1024)
    try:
        assert error_of(lambda: s3.put_bucket_tagging(
            Bucket=name, Tagging={"TagSet": [{"Key": "a", "Value": "b"}]})) == ("NotImplemented", 501)
        assert error_of(lambda: s3.get_bucket_tagging(Bucket=name)) == ("NoSuchTagSet", 404)
    finally:
        s3.delete_bucket(Bucket=name)
