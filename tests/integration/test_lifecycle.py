"""Bucket lifecycle rules: Put/Get/DeleteBucketLifecycleConfiguration with boto3 and the aws CLI, and
the background task that applies them, on a server whose lifecycle "day" is 2 seconds
(--lifecycle-day-seconds) and which applies rules every second: expiration by age and prefix (a delete
marker in a versioned bucket), noncurrent-version expiration keeping the newest N, expired delete
markers, aborting stale multipart uploads, and FjordKeepNewest for checkpoint folders."""

import hashlib
import json
import time

import pytest
import requests
from botocore.exceptions import ClientError

import s3util
from conftest import make_kv_bucket, unique_bucket_name

DAY_S = 2
LIFECYCLE_ARGS = ["--lifecycle-interval-seconds", "1", "--lifecycle-day-seconds", str(DAY_S)]
SETTLE_S = 6 * DAY_S + 5  # an action due in a day is due within two; passes run every second


def error_of(call):
    with pytest.raises(ClientError) as e:
        call()
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def rule(rule_id, prefix="", **actions):
    return {"ID": rule_id, "Filter": {"Prefix": prefix}, "Status": "Enabled", **actions}


def put_rules(s3, bucket, *rules):
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": list(rules)})


def keys(s3, bucket):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def wait_for(predicate, what):
    s3util.wait_until(predicate, timeout_s=SETTLE_S, interval_s=0.25, what=what)


@pytest.fixture
def lifecycle_server(make_server):
    return make_server(LIFECYCLE_ARGS)


def test_configuration_round_trip_and_checks(s3, bucket):
    assert error_of(lambda: s3.get_bucket_lifecycle_configuration(Bucket=bucket)) == \
        ("NoSuchLifecycleConfiguration", 404)
    rules = [rule("tmp", "tmp/", Expiration={"Days": 3}),
             {"ID": "old", "Filter": {"And": {"Prefix": "ckpt/", "Tags": [{"Key": "k", "Value": "v"}]}},
              "Status": "Disabled", "NoncurrentVersionExpiration": {"NoncurrentDays": 7,
                                                                    "NewerNoncurrentVersions": 2}},
             rule("mpu", AbortIncompleteMultipartUpload={"DaysAfterInitiation": 1})]
    put_rules(s3, bucket, *rules)
    got = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert [r["ID"] for r in got] == ["tmp", "old", "mpu"]
    assert got[0]["Expiration"] == {"Days": 3} and got[0]["Filter"] == {"Prefix": "tmp/"}
    assert got[1]["Status"] == "Disabled"
    assert got[1]["Filter"]["And"]["Tags"] == [{"Key": "k", "Value": "v"}]
    assert got[1]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 7, "NewerNoncurrentVersions": 2}
    assert got[2]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    refused = [
        ([rule("a", Expiration={"Days": 0})], ("InvalidArgument", 400)),
        ([rule("a", Expiration={"Days": 1}), rule("a", Expiration={"Days": 2})], ("InvalidArgument", 400)),
        ([rule("a", Transitions=[{"Days": 1, "StorageClass": "GLACIER"}])], ("NotImplemented", 501)),
        ([rule("a", Expiration={"Date": "2030-01-01T12:00:00Z"})], ("InvalidArgument", 400)),
        ([{"ID": "a", "Filter": {"Prefix": ""}, "Status": "Enabled"}], ("InvalidRequest", 400)),
    ]
    for rules, expected in refused:
        assert error_of(lambda: put_rules(s3, bucket, *rules)) == expected, rules
    assert len(s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]) == 3, "kept as it was"
    # A rule sent without an ID gets one, as S3 names it, and keeps it
    put_rules(s3, bucket, {"Filter": {"Prefix": "a/"}, "Status": "Enabled", "Expiration": {"Days": 1}},
              {"Filter": {"Prefix": "b/"}, "Status": "Enabled", "Expiration": {"Days": 2}})
    named = [r["ID"] for r in s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]]
    assert len(set(named)) == 2 and all(len(i) == 48 for i in named)
    assert [r["ID"] for r in s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]] == named
    s3.delete_bucket_lifecycle(Bucket=bucket)
    assert error_of(lambda: s3.get_bucket_lifecycle_configuration(Bucket=bucket))[1] == 404
    assert error_of(lambda: s3.put_bucket_lifecycle_configuration(
        Bucket=unique_bucket_name("none"),
        LifecycleConfiguration={"Rules": [rule("a", Expiration={"Days": 1})]})) == ("NoSuchBucket", 404)


def test_aws_cli_lifecycle(aws_cli, bucket):
    config = {"Rules": [rule("logs", "logs/", Expiration={"Days": 30})]}
    aws_cli("s3api", "put-bucket-lifecycle-configuration", "--bucket", bucket,
            "--lifecycle-configuration", json.dumps(config))
    got = json.loads(aws_cli("s3api", "get-bucket-lifecycle-configuration", "--bucket", bucket).stdout_text)
    assert got["Rules"][0]["Expiration"] == {"Days": 30}
    aws_cli("s3api", "delete-bucket-lifecycle", "--bucket", bucket)


def test_expiration_by_age_and_prefix(lifecycle_server):
    s3 = lifecycle_server.client()
    s3.create_bucket(Bucket="logs")
    for key in ["tmp/a", "tmp/b", "keep/c"]:
        s3.put_object(Bucket="logs", Key=key, Body=b"x")
    put_rules(s3, "logs", rule("tmp", "tmp/", Expiration={"Days": 1}))
    wait_for(lambda: keys(s3, "logs") == ["keep/c"], "tmp/ expired")
    time.sleep(2 * DAY_S)
    assert keys(s3, "logs") == ["keep/c"], "objects outside the prefix stay"


def test_versioned_expiration_noncurrent_versions_and_lone_markers(lifecycle_server):
    s3 = lifecycle_server.client()
    s3.create_bucket(Bucket="ckpt")
    s3.put_bucket_versioning(Bucket="ckpt", VersioningConfiguration={"Status": "Enabled"})
    ids = [s3.put_object(Bucket="ckpt", Key="model.pt", Body=f"v{i}".encode())["VersionId"]
           for i in range(4)]
    s3.put_object(Bucket="ckpt", Key="old/x", Body=b"x")
    put_rules(s3, "ckpt",
              rule("noncurrent", "model", NoncurrentVersionExpiration={"NoncurrentDays": 1,
                                                                        "NewerNoncurrentVersions": 1}),
              rule("old", "old/", Expiration={"Days": 1},
                   NoncurrentVersionExpiration={"NoncurrentDays": 1}),
              rule("markers", "old/", Expiration={"ExpiredObjectDeleteMarker": True}))

    def versions(key):
        page = s3.list_object_versions(Bucket="ckpt", Prefix=key)
        return [v["VersionId"] for v in page.get("Versions", [])], \
               [m["VersionId"] for m in page.get("DeleteMarkers", [])]

    # The current version and the newest noncurrent one stay; older ones go
    wait_for(lambda: versions("model.pt")[0] == [ids[3], ids[2]], "noncurrent versions expired")
    # old/x: expiration leaves a delete marker, the object becomes noncurrent and expires a day
    # later, and then the marker, alone, is removed too
    wait_for(lambda: versions("old/") == ([], []), "old/x expired and its marker removed")
    assert s3.get_object(Bucket="ckpt", Key="model.pt")["Body"].read() == b"v3"


def test_stale_multipart_uploads_are_aborted(lifecycle_server):
    s3 = lifecycle_server.client()
    s3.create_bucket(Bucket="mpu")
    upload = s3.create_multipart_upload(Bucket="mpu", Key="big/part")["UploadId"]
    s3.upload_part(Bucket="mpu", Key="big/part", UploadId=upload, PartNumber=1, Body=b"p" * 1024)
    kept = s3.create_multipart_upload(Bucket="mpu", Key="other/part")["UploadId"]
    put_rules(s3, "mpu", rule("mpu", "big/", AbortIncompleteMultipartUpload={"DaysAfterInitiation": 1}))
    wait_for(lambda: [u["UploadId"] for u in s3.list_multipart_uploads(Bucket="mpu").get("Uploads", [])]
             == [kept], "the stale upload aborted")


def put_raw_lifecycle(server, bucket, xml: str):
    body = xml.encode()
    path = f"/{bucket}"
    signed = s3util.sign_headers(server.credentials, "PUT", server.host, path, query=[("lifecycle", "")],
                                 headers={"content-type": "application/xml"},
                                 payload_hash=hashlib.sha256(body).hexdigest())
    return requests.put(f"{server.endpoint}{path}?lifecycle=", data=body, headers=signed.headers,
                        timeout=10)


def test_keep_newest_checkpoint_folders(lifecycle_server):
    s3 = lifecycle_server.client()
    s3.create_bucket(Bucket="run")
    for step in range(1, 5):
        for shard in range(2):
            s3.put_object(Bucket="run", Key=f"ckpt/step-{step}/shard-{shard}", Body=b"w")
        time.sleep(0.05)  # folders told apart by their newest object's time
    s3.put_object(Bucket="run", Key="ckpt/latest", Body=b"step-4")  # in no folder: left alone
    s3.put_object(Bucket="run", Key="logs/step-1/x", Body=b"l")
    answer = put_raw_lifecycle(lifecycle_server, "run", (
        "<LifecycleConfiguration><Rule><ID>keep-2</ID><Filter><Prefix>ckpt/</Prefix></Filter>"
        "<Status>Enabled</Status><FjordKeepNewest><Count>2</Count><Delimiter>/</Delimiter>"
        "</FjordKeepNewest></Rule></LifecycleConfiguration>"))
    assert answer.status_code == 200, answer.text
    got = s3.get_bucket_lifecycle_configuration(Bucket="run")
    assert got["Rules"][0]["ID"] == "keep-2"
    expected = ["ckpt/latest", "ckpt/step-3/shard-0", "ckpt/step-3/shard-1", "ckpt/step-4/shard-0",
                "ckpt/step-4/shard-1", "logs/step-1/x"]
    wait_for(lambda: keys(s3, "run") == expected, "only the newest two step folders kept")
    # A new step makes the oldest kept one go
    s3.put_object(Bucket="run", Key="ckpt/step-5/shard-0", Body=b"w")
    wait_for(lambda: "ckpt/step-3/shard-0" not in keys(s3, "run"), "step-3 expired after step-5")
    assert "ckpt/step-4/shard-1" in keys(s3, "run")


def test_rules_survive_restart_and_kv_buckets_refuse_them(make_server):
    server = make_server()
    s3 = server.client()
    s3.create_bucket(Bucket="rules")
    put_rules(s3, "rules", rule("a", "x/", Expiration={"Days": 5}))
    server.kill()
    server.start()
    s3 = server.client()
    assert s3.get_bucket_lifecycle_configuration(Bucket="rules")["Rules"][0]["ID"] == "a"
    name = unique_bucket_name("kv-lifecycle")
    make_kv_bucket(s3, name, capacity_bytes=64 * 1024 * 1024)
    assert error_of(lambda: put_rules(s3, name, rule("a", Expiration={"Days": 1}))) == \
        ("InvalidRequest", 400)


def test_minio_lifecycle(fjord_server, bucket):
    from minio import Minio
    from minio.commonconfig import ENABLED, Filter
    from minio.lifecycleconfig import Expiration, LifecycleConfig, Rule
    client = Minio(fjord_server.host, access_key=fjord_server.access_key,
                   secret_key=fjord_server.secret_key, secure=False)
    config = LifecycleConfig([Rule(ENABLED, rule_filter=Filter(prefix="logs/"), rule_id="logs",
                                   expiration=Expiration(days=30))])
    client.set_bucket_lifecycle(bucket, config)
    got = client.get_bucket_lifecycle(bucket)
    assert got.rules[0].rule_id == "logs" and got.rules[0].expiration.days == 30
    client.delete_bucket_lifecycle(bucket)
    assert client.get_bucket_lifecycle(bucket) is None
