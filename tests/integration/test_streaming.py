"""aws-chunked uploads built by hand (signed chunks, trailers), flexible checksums, plain HTTP chunked
bodies, and botocore's default checksum behaviour."""

import pytest
import requests
from botocore.exceptions import ClientError

import s3util
from s3util import KiB, MiB

TIMEOUT_S = 60
ALGORITHMS = ["crc32", "crc32c", "crc64nvme", "sha1", "sha256"]


def stored_bytes(s3, bucket, key):
    """The object's bytes, or None when it does not exist."""
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        assert error.response["Error"]["Code"] == "NoSuchKey", error.response
        return None


def pieces(body: bytes, size_bytes: int):
    for i in range(0, len(body), size_bytes):
        yield body[i:i + size_bytes]


def streaming_put(server, bucket, key, data, mode, chunk_bytes=64 * KiB, algorithm=None,
                  checksum_value=None, tamper_chunk=None, http_chunked=False, decoded_length=None,
                  mutate_body=None, content_encoding="aws-chunked"):
    """PUT `data` as an aws-chunked body in `mode` (a STREAMING-* payload hash).

    algorithm: adds an x-amz-checksum-<algorithm> trailer (right value unless checksum_value is given).
    http_chunked: send with Transfer-Encoding: chunked and no Content-Length, as botocore does.
    mutate_body: a function applied to the encoded body after signing (to damage it).
    """
    path = s3util.object_path(bucket, key)
    headers = {"content-encoding": content_encoding,
               "x-amz-decoded-content-length": str(len(data) if decoded_length is None else decoded_length)}
    trailers = None
    if algorithm:
        headers["x-amz-trailer"] = f"x-amz-checksum-{algorithm}"
        value = checksum_value or s3util.CHECKSUM_VALUE[algorithm](data)
        trailers = [(f"x-amz-checksum-{algorithm}", value)]
    signed = s3util.sign_headers(server.credentials, "PUT", server.host, path, headers=headers,
                                 payload_hash=mode)
    if mode == s3util.STREAMING_UNSIGNED_TRAILER:
        body = s3util.aws_chunked_unsigned(data, chunk_bytes, trailers or [])
    else:
        body = s3util.aws_chunked_signed(data, chunk_bytes, signed, trailers, tamper_chunk)
    if mutate_body:
        body = mutate_body(body)
    send_headers = dict(signed.headers)
    return requests.put(server.endpoint + path, headers=send_headers,
                        data=pieces(body, 16 * KiB) if http_chunked else body, timeout=TIMEOUT_S)


# ---------------------------------------------------------------------------------------------------
# STREAMING-AWS4-HMAC-SHA256-PAYLOAD
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sent,stored", [
    ("aws-chunked", None),
    ("aws-chunked,gzip", "gzip"),
    ("gzip, aws-chunked", "gzip"),
    ("AWS-Chunked, gzip, br", "gzip, br"),
])
def test_content_encoding_is_kept_as_sent_without_aws_chunked(fjord_server, s3, bucket, sent, stored):
    response = streaming_put(fjord_server, bucket, "encoded", b"x" * 1000, s3util.STREAMING_SIGNED,
                             content_encoding=sent)
    assert response.status_code == 200, response.text
    assert s3.head_object(Bucket=bucket, Key="encoded").get("ContentEncoding") == stored
    got = s3.get_object(Bucket=bucket, Key="encoded")
    assert got.get("ContentEncoding") == stored
    assert got["Body"].read() == b"x" * 1000


def test_content_encoding_without_aws_chunked_is_stored_verbatim(s3, bucket):
    s3.put_object(Bucket=bucket, Key="verbatim", Body=b"y", ContentEncoding="gzip, br")
    assert s3.head_object(Bucket=bucket, Key="verbatim")["ContentEncoding"] == "gzip, br"


@pytest.mark.parametrize("size_bytes,chunk_bytes", [
    (0, 64 * KiB),
    (1, 8 * KiB),
    (8 * KiB, 8 * KiB),            # exactly one full chunk
    (200_000, 8 * KiB),
    (1 * MiB + 3, 64 * KiB),
    (3 * MiB, 1 * MiB),
])
def test_signed_chunks_round_trip(fjord_server, s3, bucket, rng, size_bytes, chunk_bytes):
    data = s3util.payload(rng, size_bytes)
    response = streaming_put(fjord_server, bucket, "chunked", data, s3util.STREAMING_SIGNED, chunk_bytes)
    assert response.status_code == 200, response.text
    assert stored_bytes(s3, bucket, "chunked") == data
    assert s3.head_object(Bucket=bucket, Key="chunked")["ContentLength"] == size_bytes


def test_signed_chunks_inside_http_chunked_body(fjord_server, s3, bucket, rng):
    data = s3util.payload(rng, 300_000)
    response = streaming_put(fjord_server, bucket, "te-chunked", data, s3util.STREAMING_SIGNED,
                             32 * KiB, http_chunked=True)
    assert response.status_code == 200, response.text
    assert stored_bytes(s3, bucket, "te-chunked") == data


@pytest.mark.parametrize("tamper_chunk", [0, 2, 4], ids=["first", "middle", "final-empty"])
def test_tampered_chunk_signature_is_rejected_and_not_stored(fjord_server, s3, bucket, rng, tamper_chunk):
    data = s3util.payload(rng, 4 * 16 * KiB)  # four data chunks and the final empty one
    response = streaming_put(fjord_server, bucket, "tampered", data, s3util.STREAMING_SIGNED, 16 * KiB,
                             tamper_chunk=tamper_chunk)
    assert response.status_code == 403, response.text
    assert s3util.xml_children(response.content)["Code"] == "SignatureDoesNotMatch"
    assert stored_bytes(s3, bucket, "tampered") is None


def test_altered_chunk_data_is_rejected_and_not_stored(fjord_server, s3, bucket, rng):
    data = s3util.payload(rng, 3 * 16 * KiB)

    def flip_a_data_byte(body: bytes) -> bytes:
        position = body.index(b"\r\n") + 2 + 100  # inside the first chunk's data
        return body[:position] + bytes([body[position] ^ 0xFF]) + body[position + 1:]

    response = streaming_put(fjord_server, bucket, "altered", data, s3util.STREAMING_SIGNED, 16 * KiB,
                             mutate_body=flip_a_data_byte)
    assert response.status_code == 403, response.text
    assert stored_bytes(s3, bucket, "altered") is None


def test_short_streaming_body_is_rejected_and_not_stored(fjord_server, s3, bucket, rng):
    data = s3util.payload(rng, 50_000)
    response = streaming_put(fjord_server, bucket, "short", data, s3util.STREAMING_SIGNED, 16 * KiB,
                             decoded_length=len(data) + 1000)
    assert 400 <= response.status_code < 500, response.text
    assert stored_bytes(s3, bucket, "short") is None


def test_failed_streaming_overwrite_keeps_previous_object(fjord_server, s3, bucket, rng):
    s3.put_object(Bucket=bucket, Key="kept", Body=b"previous")
    data = s3util.payload(rng, 40_000)
    response = streaming_put(fjord_server, bucket, "kept", data, s3util.STREAMING_SIGNED, 16 * KiB,
                             tamper_chunk=1)
    assert response.status_code == 403, response.text
    assert stored_bytes(s3, bucket, "kept") == b"previous"


# ---------------------------------------------------------------------------------------------------
# Trailers: STREAMING-UNSIGNED-PAYLOAD-TRAILER and STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_unsigned_trailer_checksum_is_accepted(fjord_server, s3, bucket, rng, algorithm):
    data = s3util.payload(rng, 300_000)
    response = streaming_put(fjord_server, bucket, "trailer", data, s3util.STREAMING_UNSIGNED_TRAILER,
                             64 * KiB, algorithm=algorithm)
    assert response.status_code == 200, response.text
    assert stored_bytes(s3, bucket, "trailer") == data


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_unsigned_trailer_wrong_checksum_is_400_and_not_stored(fjord_server, s3, bucket, rng, algorithm):
    data = s3util.payload(rng, 100_000)
    response = streaming_put(fjord_server, bucket, "bad-trailer", data, s3util.STREAMING_UNSIGNED_TRAILER,
                             64 * KiB, algorithm=algorithm,
                             checksum_value=s3util.wrong_checksum_value(algorithm, data))
    assert response.status_code == 400, response.text
    assert stored_bytes(s3, bucket, "bad-trailer") is None


def test_unsigned_trailer_inside_http_chunked_body(fjord_server, s3, bucket, rng):
    """What botocore sends over HTTPS: aws-chunked framing inside Transfer-Encoding: chunked."""
    data = s3util.payload(rng, 200_000)
    response = streaming_put(fjord_server, bucket, "botocore-like", data,
                             s3util.STREAMING_UNSIGNED_TRAILER, 64 * KiB, algorithm="crc32",
                             http_chunked=True)
    assert response.status_code == 200, response.text
    assert stored_bytes(s3, bucket, "botocore-like") == data


def test_unsigned_trailer_empty_object(fjord_server, s3, bucket):
    response = streaming_put(fjord_server, bucket, "empty", b"", s3util.STREAMING_UNSIGNED_TRAILER,
                             algorithm="crc32")
    assert response.status_code == 200, response.text
    assert stored_bytes(s3, bucket, "empty") == b""


@pytest.mark.parametrize("algorithm", ["crc32", "crc32c", "crc64nvme", "sha256"])
def test_signed_trailer_checksum_is_accepted(fjord_server, s3, bucket, rng, algorithm):
    data = s3util.payload(rng, 150_000)
    response = streaming_put(fjord_server, bucket, "signed-trailer", data,
                             s3util.STREAMING_SIGNED_TRAILER, 32 * KiB, algorithm=algorithm)
    assert response.status_code == 200, response.text
    assert stored_bytes(s3, bucket, "signed-trailer") == data


def test_signed_trailer_wrong_checksum_is_400_and_not_stored(fjord_server, s3, bucket, rng):
    data = s3util.payload(rng, 150_000)
    response = streaming_put(fjord_server, bucket, "signed-bad", data, s3util.STREAMING_SIGNED_TRAILER,
                             32 * KiB, algorithm="crc32c",
                             checksum_value=s3util.wrong_checksum_value("crc32c", data))
    assert response.status_code == 400, response.text
    assert stored_bytes(s3, bucket, "signed-bad") is None


def test_signed_trailer_with_bad_trailer_signature_is_rejected(fjord_server, s3, bucket, rng):
    data = s3util.payload(rng, 50_000)

    def damage_trailer_signature(body: bytes) -> bytes:
        marker = b"x-amz-trailer-signature:"
        position = body.index(marker) + len(marker)
        replacement = b"0" if body[position:position + 1] != b"0" else b"1"
        return body[:position] + replacement + body[position + 1:]

    response = streaming_put(fjord_server, bucket, "bad-trailer-sig", data,
                             s3util.STREAMING_SIGNED_TRAILER, 16 * KiB, algorithm="crc32",
                             mutate_body=damage_trailer_signature)
    assert response.status_code == 403, response.text
    assert stored_bytes(s3, bucket, "bad-trailer-sig") is None


# ---------------------------------------------------------------------------------------------------
# Checksum headers on plain PUTs, HTTP chunked with UNSIGNED-PAYLOAD, botocore defaults
# ---------------------------------------------------------------------------------------------------

def checksum_header_put(server, bucket, key, data, algorithm, value):
    path = s3util.object_path(bucket, key)
    headers = {f"x-amz-checksum-{algorithm}": value, "x-amz-sdk-checksum-algorithm": algorithm.upper()}
    signed = s3util.sign_headers(server.credentials, "PUT", server.host, path, headers=headers,
                                 payload_hash=s3util.sha256_hex(data))
    return requests.put(server.endpoint + path, headers=signed.headers, data=data, timeout=TIMEOUT_S)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_checksum_header_is_verified(fjord_server, s3, bucket, rng, algorithm):
    data = s3util.payload(rng, 70_000)
    right = checksum_header_put(fjord_server, bucket, "good", data, algorithm,
                                s3util.CHECKSUM_VALUE[algorithm](data))
    assert right.status_code == 200, right.text
    assert stored_bytes(s3, bucket, "good") == data
    wrong = checksum_header_put(fjord_server, bucket, "bad", data, algorithm,
                                s3util.wrong_checksum_value(algorithm, data))
    assert wrong.status_code == 400, wrong.text
    assert stored_bytes(s3, bucket, "bad") is None


def test_http_chunked_body_with_unsigned_payload(fjord_server, s3, bucket, rng):
    data = s3util.payload(rng, 500_000)
    path = s3util.object_path(bucket, "te-plain")
    signed = s3util.sign_headers(fjord_server.credentials, "PUT", fjord_server.host, path,
                                 payload_hash=s3util.UNSIGNED_PAYLOAD)
    response = requests.put(fjord_server.endpoint + path, headers=signed.headers,
                            data=pieces(data, 7777), timeout=TIMEOUT_S)
    assert response.request.headers.get("Transfer-Encoding") == "chunked"
    assert response.status_code == 200, response.text
    assert stored_bytes(s3, bucket, "te-plain") == data


def test_boto3_default_put_with_crc32_then_checksum_mode_get(s3, bucket, rng):
    data = s3util.payload(rng, 2 * MiB + 5)
    put = s3.put_object(Bucket=bucket, Key="crc", Body=data)
    sent = put["ResponseMetadata"]["HTTPHeaders"]
    assert put["ResponseMetadata"]["HTTPStatusCode"] == 200
    expected_crc32 = s3util.CHECKSUM_VALUE["crc32"](data)
    if "x-amz-checksum-crc32" in sent:
        assert sent["x-amz-checksum-crc32"] == expected_crc32
    # botocore validates any x-amz-checksum-* it gets back while the body is read: a wrong one raises.
    got = s3.get_object(Bucket=bucket, Key="crc", ChecksumMode="ENABLED")
    assert got["Body"].read() == data
    assert got.get("ChecksumCRC32") in (None, expected_crc32)


def test_boto3_explicit_checksum_algorithm(s3, bucket, rng):
    data = s3util.payload(rng, 100_000)
    s3.put_object(Bucket=bucket, Key="sha256", Body=data, ChecksumAlgorithm="SHA256")
    s3.put_object(Bucket=bucket, Key="sha1", Body=data, ChecksumAlgorithm="SHA1")
    for key in ("sha256", "sha1"):
        got = s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        assert got["Body"].read() == data
