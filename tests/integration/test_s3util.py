"""The test helpers themselves, checked against published check values and botocore. No server needed:
if these fail, every other failure in the suite is suspect."""

import base64
import datetime
import hashlib
import zlib

import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

import s3util

CHECK_INPUT = b"123456789"
CREDS = s3util.Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
WHEN = datetime.datetime(2024, 5, 17, 12, 34, 56, tzinfo=datetime.timezone.utc)


def test_crc32c_check_value():
    assert s3util.crc32c(CHECK_INPUT) == 0xE3069283


def test_crc64nvme_check_value():
    assert s3util.crc64nvme(CHECK_INPUT) == 0xAE8B14860A799888


def test_crc32_check_value():
    assert s3util.crc32(CHECK_INPUT) == 0xCBF43926


@pytest.mark.parametrize("crc", [s3util.crc32c, s3util.crc64nvme, s3util.crc32])
def test_crcs_continue_across_pieces(crc):
    data = bytes(range(256)) * 5
    assert crc(data[700:], crc(data[:700])) == crc(data)


def test_checksum_values_are_base64_big_endian():
    assert s3util.CHECKSUM_VALUE["crc32"](CHECK_INPUT) == base64.b64encode(bytes.fromhex("cbf43926")).decode()
    assert s3util.CHECKSUM_VALUE["crc32c"](CHECK_INPUT) == base64.b64encode(bytes.fromhex("e3069283")).decode()
    assert (s3util.CHECKSUM_VALUE["crc64nvme"](CHECK_INPUT)
            == base64.b64encode(bytes.fromhex("ae8b14860a799888")).decode())
    assert s3util.CHECKSUM_VALUE["sha256"](b"") == base64.b64encode(hashlib.sha256(b"").digest()).decode()
    for name in s3util.CHECKSUM_VALUE:
        assert s3util.wrong_checksum_value(name, CHECK_INPUT) != s3util.CHECKSUM_VALUE[name](CHECK_INPUT)


def test_crc32_matches_botocore_checksum():
    from botocore.httpchecksum import Crc32Checksum
    checksum = Crc32Checksum()
    checksum.update(CHECK_INPUT)
    assert checksum.b64digest() == s3util.CHECKSUM_VALUE["crc32"](CHECK_INPUT)
    assert zlib.crc32(CHECK_INPUT) == s3util.crc32(CHECK_INPUT)


@pytest.mark.parametrize("key", ["plain.txt", "dir/sub dir/ü+x=1&y~z*", "a%2Fb"])
@pytest.mark.parametrize("query", [[], [("list-type", "2"), ("prefix", "a b/"), ("encoding-type", "url")]])
def test_header_signature_matches_botocore(key, query):
    host = "127.0.0.1:9000"
    path = s3util.object_path("bucket", key)
    body = b"hello"
    headers = {"content-type": "text/plain", "x-amz-meta-colour": "  blue   green "}
    payload_hash = s3util.sha256_hex(body)
    mine = s3util.sign_headers(CREDS, "PUT", host, path, query, headers, payload_hash, when=WHEN)

    url = f"http://{host}{path}" + ("?" + s3util.canonical_query(query) if query else "")
    request = AWSRequest(method="PUT", url=url, data=body, headers={
        "Content-Type": "text/plain", "x-amz-meta-colour": "  blue   green ",
        "X-Amz-Date": mine.timestamp, "X-Amz-Content-SHA256": payload_hash})
    request.context["timestamp"] = mine.timestamp
    auth = S3SigV4Auth(BotoCredentials(CREDS.access_key, CREDS.secret_key), "s3", CREDS.region)
    canonical = auth.canonical_request(request)
    theirs = auth.signature(auth.string_to_sign(request, canonical), request)
    assert mine.signature == theirs


def test_presigned_query_matches_botocore():
    host = "127.0.0.1:9000"
    path = s3util.object_path("bucket", "some key/ü")
    mine = s3util.presign_query(CREDS, "GET", host, path, 300, when=WHEN)

    request = AWSRequest(method="GET", url=f"http://{host}{path}")
    request.context["timestamp"] = s3util.amz_date(WHEN)
    auth = S3SigV4QueryAuth(BotoCredentials(CREDS.access_key, CREDS.secret_key), "s3", CREDS.region,
                            expires=300)
    auth._modify_request_before_signing(request)
    canonical = auth.canonical_request(request)
    theirs = auth.signature(auth.string_to_sign(request, canonical), request)
    assert f"X-Amz-Signature={theirs}" in mine


def test_signed_chunk_body_frames_and_chains():
    signed = s3util.sign_headers(CREDS, "PUT", "h", "/b/k", payload_hash=s3util.STREAMING_SIGNED, when=WHEN)
    data = bytes(range(200))
    body = s3util.aws_chunked_signed(data, 64, signed)
    lines = body.split(b"\r\n")
    assert lines[0].startswith(b"40;chunk-signature=")
    assert body.count(b";chunk-signature=") == 5  # 64+64+64+8, then the final empty chunk
    assert body.endswith(b"\r\n\r\n") and b"\r\n0;chunk-signature=" in body
    first = s3util.chunk_signature(signed, signed.signature, data[:64])
    assert lines[0] == f"40;chunk-signature={first}".encode()
    tampered = s3util.aws_chunked_signed(data, 64, signed, tamper_chunk=1)
    assert tampered != body and len(tampered) == len(body)


def test_unsigned_trailer_body_frames_like_botocore():
    body = s3util.aws_chunked_unsigned(b"abcdef", 4, [("x-amz-checksum-crc32", "AAAAAA==")])
    assert body == b"4\r\nabcd\r\n2\r\nef\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"
