"""HTTPS: `fjord serve --tls-cert --tls-key` driven by real clients (boto3, the aws CLI, rclone, s3cmd,
minio-py; s3torchconnector in test_s3torchconnector.py) that verify the server against a CA the tests make
(tls_ca.py). Over https the SDKs send their default trailer-checksum uploads (aws-chunked,
STREAMING-UNSIGNED-PAYLOAD-TRAILER) and multipart uploads: both are checked byte for byte. Also: TLS 1.2
and 1.3 accepted, TLS 1.1 refused, a client that does not trust the certificate refused (and counted), a
plain-HTTP request to the TLS port closed without an answer, SIGHUP loading a renewed certificate for new
connections, and a bad certificate at start or at reload.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time

import boto3
import pytest
import requests
import urllib3
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import SSLError

from conftest import (REGION, REPO_ROOT, FjordServer, ToolRunner, _scrub_environment, binary_path,
                      free_port, server_metric)
from s3util import MiB
from tls_ca import CertificateAuthority

SIZES = [0, 1, 4096, 5 * MiB + 1]


@pytest.fixture(scope="module")
def ca(session_tmp):
    return CertificateAuthority(session_tmp / "tls-ca")


@pytest.fixture(scope="module")
def tls_server(session_tmp, ca):
    server = FjordServer(session_tmp / "server-tls", name="fjord-tls", tls=ca.issue("shared"))
    server.start()
    yield server
    status = server.stop()
    assert status == 0, f"exit status {status} after SIGTERM; log tail:\n{server.log_tail()}"


@pytest.fixture
def tls_bucket(tls_server, request):
    client = tls_server.client()
    name = "tls-" + hashlib.sha1(request.node.name.encode()).hexdigest()[:12]
    client.create_bucket(Bucket=name)
    yield name
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
        for entry in page.get("Contents", []):
            client.delete_object(Bucket=name, Key=entry["Key"])
    client.delete_bucket(Bucket=name)


def peer_serial(server: FjordServer) -> str:
    """The serial number of the certificate a new connection is shown, verified against the CA."""
    context = ssl.create_default_context(cafile=str(server.tls.ca_path))
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.getpeercert()["serialNumber"]


def test_boto3_default_uploads_over_https_use_trailer_checksums(tls_server, tls_bucket):
    client = tls_server.client()
    seen = []
    client.meta.events.register(
        "before-send.s3.PutObject",
        lambda request, **_: seen.append(request.headers.get("x-amz-content-sha256", b"")))
    for size in SIZES:
        body = os.urandom(size)
        client.put_object(Bucket=tls_bucket, Key=f"k{size}", Body=body)
        got = client.get_object(Bucket=tls_bucket, Key=f"k{size}")
        assert got["Body"].read() == body, size
    # What the SDK chose over https (not what a test forced): unsigned payload, checksum in a trailer.
    assert all(value in (b"STREAMING-UNSIGNED-PAYLOAD-TRAILER", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
               for value in seen), seen


def test_boto3_multipart_transfer_and_ranges_over_https(tls_server, tls_bucket, tmp_dir):
    client = tls_server.client()
    source = tmp_dir / "big"
    body = os.urandom(21 * MiB + 7)
    source.write_bytes(body)
    config = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB, max_concurrency=4)
    client.upload_file(str(source), tls_bucket, "big", Config=config)
    assert client.head_object(Bucket=tls_bucket, Key="big")["ETag"].endswith('-3"')
    target = tmp_dir / "big.back"
    client.download_file(tls_bucket, "big", str(target), Config=config)
    assert target.read_bytes() == body
    part = client.get_object(Bucket=tls_bucket, Key="big", Range="bytes=8388600-8388700")
    assert part["Body"].read() == body[8388600:8388701]
    done = client.list_objects_v2(Bucket=tls_bucket)
    assert [c["Key"] for c in done["Contents"]] == ["big"]


def test_complete_multipart_location_names_https(tls_server, tls_bucket):
    client = tls_server.client()
    upload = client.create_multipart_upload(Bucket=tls_bucket, Key="located")["UploadId"]
    etag = client.upload_part(Bucket=tls_bucket, Key="located", UploadId=upload, PartNumber=1,
                              Body=b"x" * 10)["ETag"]
    done = client.complete_multipart_upload(Bucket=tls_bucket, Key="located", UploadId=upload,
                                            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert done["Location"].startswith("https://"), done["Location"]


def test_a_client_that_does_not_trust_the_certificate_is_refused(tls_server):
    before = server_metric(tls_server, "fjord_tls_handshake_failures_total")
    # Verified against the system's CAs, which do not include the test CA.
    client = boto3.session.Session().client(
        "s3", endpoint_url=tls_server.endpoint, region_name=REGION,
        aws_access_key_id=tls_server.access_key, aws_secret_access_key=tls_server.secret_key)
    with pytest.raises(SSLError):
        client.list_buckets()
    deadline = time.monotonic() + 10
    while server_metric(tls_server, "fjord_tls_handshake_failures_total") == before:
        assert time.monotonic() < deadline, "the refused handshake was not counted"
        time.sleep(0.05)


def test_plain_http_to_the_tls_port_gets_no_answer(tls_server):
    before = server_metric(tls_server, "fjord_tls_handshake_failures_total")
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=10) as s:
        s.sendall(b"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        received = b""
        while chunk := s.recv(4096):
            received += chunk
    # At most a TLS alert record (content type 21), never an HTTP answer in the clear.
    assert b"HTTP/1.1" not in received
    assert received == b"" or received[0] == 21, received[:16]
    assert server_metric(tls_server, "fjord_tls_handshake_failures_total") == before + 1
    assert requests.get(f"{tls_server.endpoint}/health/live", verify=str(tls_server.tls.ca_path),
                        timeout=10).status_code == 200


@pytest.mark.parametrize("version,accepted", [("-tls1_1", False), ("-tls1_2", True), ("-tls1_3", True)])
def test_tls_versions(tls_server, version, accepted):
    # SECLEVEL=0 lets this client offer TLS 1.1 at all: the refusal must come from the server.
    result = subprocess.run(
        ["openssl", "s_client", "-connect", tls_server.host, version, "-CAfile",
         str(tls_server.tls.ca_path), "-cipher", "DEFAULT@SECLEVEL=0", "-verify_return_error"],
        input=b"", capture_output=True, timeout=30)
    output = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
    expected = {"-tls1_1": "TLSv1.1", "-tls1_2": "TLSv1.2", "-tls1_3": "TLSv1.3"}[version]
    # The line s_client prints once the handshake is done ("New, (NONE), Cipher is (NONE)" when it failed);
    # its SSL-Session block may not come at all for TLS 1.3, whose session tickets can arrive after
    # s_client has already seen the end of its input and quit.
    negotiated = f"New, {expected}, Cipher is " in output
    if accepted:
        assert result.returncode == 0 and negotiated, output
        assert "Verify return code: 0 (ok)" in output, output
    else:
        assert result.returncode != 0 and not negotiated, output
        assert "alert protocol version" in output, output


@pytest.fixture(scope="module")
def rsa_tls_server(session_tmp, ca):
    """A server with an RSA certificate: the one kind that static-RSA key exchange could use."""
    server = FjordServer(session_tmp / "server-tls-rsa", name="fjord-tls-rsa",
                         tls=ca.issue("shared-rsa", rsa=True))
    server.start()
    yield server
    assert server.stop() == 0, server.log_tail()


@pytest.mark.parametrize("cipher,accepted", [
    ("AES128-SHA", False),                      # static RSA key exchange, CBC with SHA-1
    ("AES256-GCM-SHA384", False),               # static RSA key exchange, even with an AEAD
    ("ECDHE-RSA-AES128-SHA", False),            # forward secret, but CBC with SHA-1
    ("ECDHE-RSA-AES256-SHA384", False),         # forward secret, CBC
    ("ECDHE-RSA-AES128-GCM-SHA256", True),
    ("ECDHE-RSA-AES256-GCM-SHA384", True),
    ("ECDHE-RSA-CHACHA20-POLY1305", True)])
def test_tls12_offers_only_forward_secret_aead_suites(rsa_tls_server, cipher, accepted):
    result = subprocess.run(
        ["openssl", "s_client", "-connect", rsa_tls_server.host, "-tls1_2", "-CAfile",
         str(rsa_tls_server.tls.ca_path), "-cipher", f"{cipher}@SECLEVEL=0", "-verify_return_error"],
        input=b"", capture_output=True, timeout=30)
    output = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
    negotiated = f"New, TLSv1.2, Cipher is {cipher}" in output
    if accepted:
        assert result.returncode == 0 and negotiated, output
    else:
        assert result.returncode != 0 and not negotiated, output


def test_aws_cli_over_https(tls_server, tls_bucket, tmp_dir):
    aws = REPO_ROOT / ".venv-awscli" / "bin" / "aws"
    env = _scrub_environment(dict(os.environ))
    env.update({"AWS_ACCESS_KEY_ID": tls_server.access_key,
                "AWS_SECRET_ACCESS_KEY": tls_server.secret_key,
                "AWS_DEFAULT_REGION": REGION, "AWS_MAX_ATTEMPTS": "1"})
    cli = ToolRunner([str(aws), "--endpoint-url", tls_server.endpoint, "--ca-bundle",
                      str(tls_server.tls.ca_path)], env, tmp_dir)
    source = tmp_dir / "cli-upload"
    body = os.urandom(9 * MiB + 5)  # above the CLI's 8 MiB multipart threshold
    source.write_bytes(body)
    cli("s3", "cp", source, f"s3://{tls_bucket}/cli/big")
    cli("s3api", "put-object", "--bucket", tls_bucket, "--key", "cli/small", "--body", source)
    back = tmp_dir / "cli-back"
    cli("s3", "cp", f"s3://{tls_bucket}/cli/big", back)
    assert back.read_bytes() == body
    listed = cli("s3", "ls", f"s3://{tls_bucket}/cli/").stdout_text
    assert "big" in listed and "small" in listed
    # Without the CA the CLI refuses the server.
    plain = ToolRunner([str(aws), "--endpoint-url", tls_server.endpoint], env, tmp_dir)
    refused = plain("s3", "ls", f"s3://{tls_bucket}/", check=False)
    assert refused.returncode != 0 and "SSL" in refused.stderr_text, refused.stderr_text


def test_rclone_over_https(tls_server, tls_bucket, tmp_dir):
    binary = shutil.which("rclone")
    env = _scrub_environment(dict(os.environ))
    env.update({
        "RCLONE_CONFIG_TLSFJORD_TYPE": "s3", "RCLONE_CONFIG_TLSFJORD_PROVIDER": "Other",
        "RCLONE_CONFIG_TLSFJORD_ENDPOINT": tls_server.endpoint,
        "RCLONE_CONFIG_TLSFJORD_ACCESS_KEY_ID": tls_server.access_key,
        "RCLONE_CONFIG_TLSFJORD_SECRET_ACCESS_KEY": tls_server.secret_key,
        "RCLONE_CONFIG_TLSFJORD_REGION": REGION, "RCLONE_CONFIG_TLSFJORD_FORCE_PATH_STYLE": "true",
    })
    config = tmp_dir / "rclone.conf"
    config.write_text("")
    rclone = ToolRunner([binary, "--config", str(config), "--retries", "1", "--low-level-retries", "1",
                         "--ca-cert", str(tls_server.tls.ca_path), "--s3-upload-cutoff", "5M",
                         "--s3-chunk-size", "5M"], env, tmp_dir)
    source = tmp_dir / "rclone-upload"
    body = os.urandom(12 * MiB + 1)  # multipart at rclone's 5 MiB cut-off
    source.write_bytes(body)
    rclone("copyto", source, f"tlsfjord:{tls_bucket}/rclone/big")
    back = tmp_dir / "rclone-back"
    rclone("copyto", f"tlsfjord:{tls_bucket}/rclone/big", back)
    assert back.read_bytes() == body
    assert rclone("cat", f"tlsfjord:{tls_bucket}/rclone/big").stdout == body


def test_s3cmd_over_https(tls_server, tls_bucket, tmp_dir):
    config = tmp_dir / "s3cmd.cfg"
    config.write_text("\n".join([
        "[default]", f"access_key = {tls_server.access_key}", f"secret_key = {tls_server.secret_key}",
        f"host_base = {tls_server.host}", f"host_bucket = {tls_server.host}",
        f"bucket_location = {REGION}", "use_https = True", "check_ssl_certificate = True",
        "check_ssl_hostname = True", f"ca_certs_file = {tls_server.tls.ca_path}",
        "signature_v2 = False", "progress_meter = False", ""]))
    env = _scrub_environment(dict(os.environ))
    env["HOME"] = str(tmp_dir)
    s3cmd = ToolRunner([shutil.which("s3cmd"), "-c", str(config), "--no-progress"], env, tmp_dir)
    source = tmp_dir / "s3cmd-upload"
    body = os.urandom(16 * MiB + 3)  # multipart at s3cmd's 15 MiB chunks
    source.write_bytes(body)
    s3cmd("put", source, f"s3://{tls_bucket}/s3cmd/big")
    back = tmp_dir / "s3cmd-back"
    s3cmd("get", f"s3://{tls_bucket}/s3cmd/big", back)
    assert back.read_bytes() == body


def test_minio_over_https(tls_server, tls_bucket):
    from minio import Minio

    pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(tls_server.tls.ca_path))
    client = Minio(tls_server.host, access_key=tls_server.access_key,
                   secret_key=tls_server.secret_key, secure=True, region=REGION, http_client=pool)
    body = os.urandom(6 * MiB + 9)
    client.put_object(tls_bucket, "minio/obj", io.BytesIO(body), len(body), part_size=5 * MiB)
    response = client.get_object(tls_bucket, "minio/obj")
    try:
        assert response.read() == body
    finally:
        response.close()
        response.release_conn()


def test_sighup_loads_a_renewed_certificate_for_new_connections(make_server, tmp_dir):
    ca = CertificateAuthority(tmp_dir / "ca")
    first = ca.issue("first")
    server = make_server(tls=first)
    assert int(peer_serial(server), 16) == int(first.serial, 16)
    client = server.client()
    client.create_bucket(Bucket="renewed")
    client.put_object(Bucket="renewed", Key="k", Body=b"before")

    renewed = ca.issue("second")
    shutil.copyfile(renewed.cert_path, first.cert_path)
    shutil.copyfile(renewed.key_path, first.key_path)
    server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while int(peer_serial(server), 16) != int(renewed.serial, 16):
        assert time.monotonic() < deadline, f"still the old certificate; log:\n{server.log_tail()}"
        time.sleep(0.05)
    assert server.client().get_object(Bucket="renewed", Key="k")["Body"].read() == b"before"

    # A broken renewal (a key that does not match) is refused; the current certificate stays.
    shutil.copyfile(ca.issue("third").key_path, first.key_path)
    server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "keeping the current TLS certificate" not in server.log_tail():
        assert time.monotonic() < deadline, server.log_tail()
        time.sleep(0.05)
    assert int(peer_serial(server), 16) == int(renewed.serial, 16)
    assert server.process.poll() is None


def test_bad_tls_options_stop_the_server_at_start(tmp_dir):
    ca = CertificateAuthority(tmp_dir / "ca")
    good = ca.issue("good")
    other = ca.issue("other")
    cases = [
        (["--tls-cert", str(good.cert_path)], 2, "--tls-cert and --tls-key go together"),
        (["--tls-cert", str(tmp_dir / "missing.pem"), "--tls-key", str(good.key_path)], 1,
         "cannot load the TLS certificate chain"),
        (["--tls-cert", str(good.cert_path), "--tls-key", str(other.key_path)], 1,
         "does not match the certificate"),
    ]
    for args, status, message in cases:
        result = subprocess.run(
            [str(binary_path()), "serve", "--data", str(tmp_dir / "data"), "--listen", f"127.0.0.1:{free_port()}",
             *args], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        assert result.returncode == status, (args, result.stderr)
        assert message in result.stderr.decode(), (args, result.stderr)


def test_fjord_cli_over_https(tls_server, tls_bucket, tmp_dir):
    def fjord(*args, ca=True):
        env = {k: v for k, v in os.environ.items() if not k.startswith("FJORD_")}
        env.update({"FJORD_ENDPOINT": tls_server.endpoint, "FJORD_ACCESS_KEY": tls_server.access_key,
                    "FJORD_SECRET_KEY": tls_server.secret_key})
        if ca:
            env["FJORD_CA_CERT"] = str(tls_server.tls.ca_path)
        return subprocess.run([str(binary_path()), *map(str, args)], env=env, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL)

    source = tmp_dir / "cli-source"
    body = os.urandom(17 * MiB + 1)  # multipart at the default 8 MiB parts
    source.write_bytes(body)
    put = fjord("cp", source, f"s3://{tls_bucket}/fjord/big")
    assert put.returncode == 0, put.stderr
    back = tmp_dir / "cli-back"
    got = fjord("cp", f"s3://{tls_bucket}/fjord/big", back)
    assert got.returncode == 0, got.stderr
    assert back.read_bytes() == body
    listed = fjord("ls", f"s3://{tls_bucket}/fjord/")
    assert listed.returncode == 0 and "big" in listed.stdout, listed.stderr
    # Without the test CA the server is not trusted: one clear line, nothing sent.
    refused = fjord("ls", f"s3://{tls_bucket}/", ca=False)
    assert refused.returncode != 0
    assert "certificate verify failed" in refused.stderr, refused.stderr


def test_kv_batch_over_https_arrives_whole(tls_server):
    """A KV batch get over TLS: small blocks gathered into records, large ones sent as they lie, every
    block back in order with its CRC32C."""
    import s3util
    from conftest import make_kv_bucket, unique_bucket_name
    from test_kv import batch_headers, frame, parse_get

    client = tls_server.client()
    bucket = unique_bucket_name("tlskv")
    make_kv_bucket(client, bucket, capacity_bytes=64 * MiB)
    path = s3util.object_path(bucket)

    def post(op: str, body: bytes) -> bytes:
        r = requests.post(f"{tls_server.endpoint}{path}?fjord-batch={op}", data=body,
                          headers=batch_headers(tls_server, path, op, body),
                          verify=str(tls_server.tls.ca_path), timeout=30)
        assert r.status_code == 200, r.text
        return r.content

    sizes = [1, 4096, 4097, 65535, 65536, 65537, 200_000, 3] * 3
    blocks = {f"b/{i}": os.urandom(n) for i, n in enumerate(sizes)}
    post("put", frame("put", [(k, s3util.crc32c(v), len(v)) for k, v in blocks.items()],
                      blocks.values()))
    keys = [k for key in blocks for k in (key, "b/missing")]
    content = post("get", frame("get", [(k, 0, 0) for k in keys]))
    values, _ = parse_get(content)
    assert values == [blocks.get(k) for k in keys]  # "b/missing" is None
    for key in blocks:
        client.delete_object(Bucket=bucket, Key=key)
    client.delete_bucket(Bucket=bucket)
