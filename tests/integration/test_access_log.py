"""The access log (--access-log): one JSON line per request with who, what, how it ended and how long it
took, never a signature or a secret; and failed authentications at warn in the server log, rate-limited.

The log is read after the server stopped: a shutdown waits for every line already logged, so the file is
complete then (no polling)."""

import json

import requests

import s3util
from conftest import FjordServer, make_client

FIELDS = {"time", "remote", "access_key", "operation", "bucket", "key", "status", "bytes_in", "bytes_out",
          "duration_us", "request_id"}


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_request_gets_one_line_and_no_secret(tmp_dir):
    log_path = tmp_dir / "access.jsonl"
    server = FjordServer(tmp_dir / "logged", extra_args=["--access-log", str(log_path)])
    server.start()
    s3 = make_client(server)
    s3.create_bucket(Bucket="logged")
    body = b"x" * 100_000
    s3.put_object(Bucket="logged", Key="dir/obj\u00e9", Body=body)
    got = s3.get_object(Bucket="logged", Key="dir/obj\u00e9")["Body"].read()
    assert got == body
    s3.head_object(Bucket="logged", Key="dir/obj\u00e9")
    s3.list_objects_v2(Bucket="logged")
    presigned = make_client(server, signature_version="s3v4").generate_presigned_url("get_object", Params={"Bucket": "logged", "Key": "dir/obj\u00e9"})
    assert requests.get(presigned, timeout=30).content == body
    bad = make_client(server, secret_key="not-the-secret-at-all")
    try:
        bad.get_object(Bucket="logged", Key="dir/obj\u00e9")
    except Exception:
        pass
    with s3util.RawConnection("127.0.0.1", server.port) as conn:  # an unparseable request is logged too
        conn.send(b"GARBAGE\r\n\r\n")
        conn.read_until_close()
    s3.delete_object(Bucket="logged", Key="dir/obj\u00e9")
    server.stop()

    text = log_path.read_text()
    lines = read_lines(log_path)
    for line in lines:
        assert set(line) == FIELDS, line
    for secret in (server.secret_key, "not-the-secret-at-all", "Signature", "X-Amz-Signature", "AWS4-HMAC-SHA256"):
        assert secret not in text
    by_operation = {}
    for line in lines:
        by_operation.setdefault(line["operation"], []).append(line)
    put = by_operation["PutObject"][0]
    assert put["status"] == 200 and put["bucket"] == "logged" and put["key"] == "dir/obj\u00e9"
    assert put["access_key"] == server.access_key and put["bytes_in"] >= len(body)
    assert put["remote"].startswith("127.0.0.1:") and put["duration_us"] >= 0 and put["request_id"]
    gets = by_operation["GetObject"]
    assert [g["status"] for g in gets] == [200, 200, 403]  # boto3, presigned, wrong secret
    assert all(g["bytes_out"] > len(body) for g in gets[:2])
    assert gets[2]["access_key"] == ""  # not authenticated
    assert by_operation["HeadObject"][0]["status"] == 200
    assert by_operation["ListObjectsV2"][0]["status"] == 200
    assert by_operation["DeleteObject"][0]["status"] == 204
    assert by_operation["CreateBucket"][0]["status"] == 200
    assert [line["status"] for line in by_operation["-"]] == [400]
    assert len({line["request_id"] for line in lines}) == len(lines)


def test_access_log_to_stderr(tmp_dir):
    server = FjordServer(tmp_dir / "stderr", extra_args=["--access-log", "-"])
    server.start()
    make_client(server).list_buckets()
    server.stop()
    logged = [json.loads(line) for line in server.log_path.read_text().splitlines() if line.startswith("{")]
    assert [line["operation"] for line in logged if line["operation"] == "ListBuckets"] == ["ListBuckets"]


def test_no_access_log_by_default(fjord_server, s3, bucket):
    s3.list_objects_v2(Bucket=bucket)
    assert '"operation":' not in fjord_server.log_path.read_text()


def test_failed_authentications_are_warned_about_at_a_bounded_rate(tmp_dir):
    server = FjordServer(tmp_dir / "auth", cores=1)
    server.start()
    bad = make_client(server, secret_key="wrong-secret-wrong-secret")
    for _ in range(200):
        try:
            bad.head_bucket(Bucket="nope")
        except Exception:
            pass
    server.stop()
    warnings = [line for line in server.log_path.read_text().splitlines() if "authentication failed" in line]
    # A burst of 20, then 5 a second per core: far fewer lines than failures, however fast they came.
    assert 20 <= len(warnings) < 200, len(warnings)
    assert all("SignatureDoesNotMatch" in w and f"access key '{server.access_key}'" in w for w in warnings)
    assert all("wrong-secret" not in w and "Signature=" not in w for w in warnings)


def test_a_key_with_line_breaks_cannot_forge_server_log_lines(tmp_dir):
    """A failed authentication logs the resource, and keys may hold LF: it must not start a new line.
    (A private server: its warning budget is not spent by other tests.)"""
    server = FjordServer(tmp_dir / "forge")
    server.start()
    forged = "2026-01-01T00:00:00.000Z ERROR [core 0] forged"
    path = "/no-such-bucket/x%0A" + forged.replace(" ", "%20").replace("[", "%5B").replace("]", "%5D")
    response = requests.get(server.endpoint + path, headers={"Authorization": "AWS4-HMAC-SHA256 bogus"}, timeout=30)
    assert response.status_code in (400, 403)
    server.stop()
    lines = server.log_path.read_text(errors="replace").splitlines()
    assert not any(line.startswith(forged) for line in lines)
    assert any("x\\x0a" + forged in line for line in lines), "the failed authentication was logged, escaped"
