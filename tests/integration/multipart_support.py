"""Helpers shared by the multipart, copy / batch-delete, race and client tests: uploads through boto3,
ETag and checksum expectations computed from the protocol (not from the server), hand-signed requests
for bodies boto3 will not send, and a count of the server's data files for space accounting."""

from __future__ import annotations

import base64
import hashlib
import zlib
from pathlib import Path

import requests

import s3util
from s3util import MiB

MIN_PART_BYTES = 5 * MiB


def client_error(excinfo) -> tuple[str, int]:
    """(error code, HTTP status) of a botocore ClientError caught by pytest.raises."""
    response = excinfo.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def start_upload(s3, bucket: str, key: str, **create_kwargs) -> str:
    return s3.create_multipart_upload(Bucket=bucket, Key=key, **create_kwargs)["UploadId"]


def upload_parts(s3, bucket: str, key: str, upload_id: str, parts: list[bytes], first_number: int = 1,
                 **part_kwargs) -> list[dict]:
    """Uploads `parts` as consecutive part numbers; returns the CompleteMultipartUpload part list
    (PartNumber, ETag and any Checksum* the server answered with)."""
    listed = []
    for offset, data in enumerate(parts):
        number = first_number + offset
        response = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number,
                                  Body=data, **part_kwargs)
        entry = {"PartNumber": number, "ETag": response["ETag"]}
        for name in ("ChecksumCRC32", "ChecksumCRC32C", "ChecksumCRC64NVME", "ChecksumSHA1",
                     "ChecksumSHA256"):
            if response.get(name):
                entry[name] = response[name]
        listed.append(entry)
    return listed


def complete(s3, bucket: str, key: str, upload_id: str, parts: list[dict], **kwargs) -> dict:
    return s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                        MultipartUpload={"Parts": parts}, **kwargs)


def multipart_put(s3, bucket: str, key: str, parts: list[bytes], create_kwargs=None,
                  part_kwargs=None) -> tuple[dict, list[dict]]:
    """Create, upload every part, complete. Returns (Complete response, part list)."""
    upload_id = start_upload(s3, bucket, key, **(create_kwargs or {}))
    listed = upload_parts(s3, bucket, key, upload_id, parts, **(part_kwargs or {}))
    return complete(s3, bucket, key, upload_id, listed), listed


def multipart_etag(part_etags: list[str]) -> str:
    """S3's multipart ETag: MD5 over the concatenated 16-byte values of the part ETags, then '-N'.
    A part ETag is read as its first 32 hex digits (an MD5, or Fjord's default tag of the same form)."""
    raw = b"".join(bytes.fromhex(etag.strip('"')[:32]) for etag in part_etags)
    return f'"{hashlib.md5(raw).hexdigest()}-{len(part_etags)}"'


def composite_checksum(algorithm: str, parts: list[bytes]) -> str:
    """COMPOSITE checksum: the checksum of the concatenated raw part checksums, then '-N'."""
    raw_parts = b"".join(base64.b64decode(s3util.CHECKSUM_VALUE[algorithm](p)) for p in parts)
    return f"{s3util.CHECKSUM_VALUE[algorithm](raw_parts)}-{len(parts)}"


def full_object_crc32(data: bytes) -> str:
    return base64.b64encode((zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "big")).decode()


def full_object_crc64nvme(data: bytes) -> str:
    return s3util.CHECKSUM_VALUE["crc64nvme"](data)


def data_file_count(server) -> int:
    """Files under <data>/objects/??/ of every data directory of `server`: the object and part data."""
    return sum(1 for d in server.data_dirs for path in Path(d).glob("objects/??/*") if path.is_file())


def wait_for_file_count(server, expected: int, what: str, timeout_s: float = 10.0):
    """Space is reclaimed when the request returns or shortly after: poll with a deadline."""
    try:
        s3util.wait_until(lambda: data_file_count(server) == expected, timeout_s, what=what)
    except TimeoutError:
        raise AssertionError(f"{what}: {data_file_count(server)} data files, expected {expected}") \
            from None


def signed_request(server, method: str, bucket: str, key: str | None = None, query=(),
                   headers=None, body: bytes = b"") -> requests.Response:
    """A request signed by s3util's own SigV4 code, for bodies and headers boto3 will not produce."""
    path = s3util.object_path(bucket, key)
    signed = s3util.sign_headers(server.credentials, method, server.host, path, query, headers,
                                 payload_hash=s3util.sha256_hex(body))
    url = server.endpoint + path + ("?" + s3util.canonical_query(query) if query else "")
    return requests.request(method, url, headers=signed.headers, data=body, timeout=60)


def error_code(response: requests.Response) -> str:
    return s3util.xml_children(response.content).get("Code", "")
