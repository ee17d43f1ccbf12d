"""Helpers shared by the integration tests: checksums, SigV4 signing, aws-chunked bodies, raw HTTP.

Everything here is written from the AWS documentation, independently of the server, so that a test
that uses these helpers checks Fjord against the protocol and not against itself. `test_s3util.py`
checks the helpers against known check values and against botocore's own signer; it needs no server.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import random
import socket
import time
import xml.etree.ElementTree as ElementTree
import zlib
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
S3_XML_NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"


# ---------------------------------------------------------------------------------------------------
# Deterministic data
# ---------------------------------------------------------------------------------------------------

def payload(rng: random.Random, size_bytes: int) -> bytes:
    """Pseudo-random bytes from `rng`, so a failing run can be replayed from its printed seed."""
    return rng.randbytes(size_bytes)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def file_sha256_hex(path, chunk_bytes: int = 4 * MiB) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def stream_sha256_hex(stream, chunk_bytes: int = 4 * MiB) -> tuple[str, int]:
    """(sha256 hex, size in bytes) of a readable stream, read in bounded chunks."""
    digest = hashlib.sha256()
    size_bytes = 0
    while chunk := stream.read(chunk_bytes):
        digest.update(chunk)
        size_bytes += len(chunk)
    return digest.hexdigest(), size_bytes


# ---------------------------------------------------------------------------------------------------
# CRCs (pure Python, table driven; fine for a few MiB)
# ---------------------------------------------------------------------------------------------------

def _reflected_table(polynomial_reflected: int) -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ polynomial_reflected if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C_TABLE = _reflected_table(0x82F63B78)
_CRC64NVME_TABLE = _reflected_table(0x9A6C9329AC4BC9B5)
_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def crc32(data: bytes, crc: int = 0) -> int:
    return zlib.crc32(data, crc) & _MASK32


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli), reflected, init and xorout all ones. Continuable like zlib.crc32."""
    crc ^= _MASK32
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ _MASK32


def crc64nvme(data: bytes, crc: int = 0) -> int:
    """CRC-64/NVME: reflected polynomial 0x9A6C9329AC4BC9B5, init and xorout all ones."""
    crc ^= _MASK64
    table = _CRC64NVME_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ _MASK64


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# The value S3 expects in x-amz-checksum-<name>: base64 of the big-endian digest.
CHECKSUM_VALUE = {
    "crc32": lambda data: _b64(crc32(data).to_bytes(4, "big")),
    "crc32c": lambda data: _b64(crc32c(data).to_bytes(4, "big")),
    "crc64nvme": lambda data: _b64(crc64nvme(data).to_bytes(8, "big")),
    "sha1": lambda data: _b64(hashlib.sha1(data).digest()),
    "sha256": lambda data: _b64(hashlib.sha256(data).digest()),
}


def wrong_checksum_value(algorithm: str, data: bytes) -> str:
    """A well-formed checksum of the right length that does not match `data`."""
    return CHECKSUM_VALUE[algorithm](data + b"\x00")


# ---------------------------------------------------------------------------------------------------
# SigV4
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    service: str = "s3"


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def amz_date(when: datetime.datetime) -> str:
    return when.astimezone(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def uri_encode(text: str, encode_slash: bool = True) -> str:
    """RFC 3986 encoding as SigV4 wants it: unreserved characters stay, everything else is %XX."""
    return quote(text, safe="-_.~" if encode_slash else "-_.~/")


def object_path(bucket: str, key: str | None = None) -> str:
    """Path-style request path, percent-encoded once (S3 does not double-encode)."""
    if key is None:
        return "/" + bucket
    return "/" + bucket + "/" + uri_encode(key, encode_slash=False)


def canonical_query(params) -> str:
    encoded = sorted((uri_encode(str(k)), uri_encode(str(v))) for k, v in params)
    return "&".join(f"{k}={v}" for k, v in encoded)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signing_key(creds: Credentials, day: str) -> bytes:
    key = _hmac(("AWS4" + creds.secret_key).encode(), day)
    key = _hmac(key, creds.region)
    key = _hmac(key, creds.service)
    return _hmac(key, "aws4_request")


def credential_scope(creds: Credentials, timestamp: str) -> str:
    return f"{timestamp[:8]}/{creds.region}/{creds.service}/aws4_request"


# Headers that clients send but do not sign (botocore leaves out the same ones).
_UNSIGNED_HEADERS = {"expect", "user-agent", "x-amzn-trace-id", "transfer-encoding", "connection",
                     "accept-encoding", "accept"}


@dataclass
class Signed:
    """A signed request: the headers to send and what chunk signing continues from."""
    headers: dict
    signature: str
    timestamp: str
    scope: str
    key: bytes


def sign_headers(creds: Credentials, method: str, host: str, path: str, query=(), headers=None,
                 payload_hash: str = UNSIGNED_PAYLOAD, when: datetime.datetime | None = None) -> Signed:
    """SigV4 header authentication. `path` is the already-encoded request path; `host` the Host value."""
    timestamp = amz_date(when or utc_now())
    all_headers = {"host": host, "x-amz-date": timestamp, "x-amz-content-sha256": payload_hash}
    for name, value in (headers or {}).items():
        all_headers[name.lower()] = str(value)
    signed_names = sorted(n for n in all_headers if n not in _UNSIGNED_HEADERS)
    canonical_headers = "".join(f"{n}:{' '.join(all_headers[n].split())}\n" for n in signed_names)
    canonical_request = "\n".join([method, path, canonical_query(query), canonical_headers,
                                   ";".join(signed_names), payload_hash])
    scope = credential_scope(creds, timestamp)
    string_to_sign = "\n".join(["AWS4-HMAC-SHA256", timestamp, scope,
                                sha256_hex(canonical_request.encode())])
    key = signing_key(creds, timestamp[:8])
    signature = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    all_headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, "
                                    f"SignedHeaders={';'.join(signed_names)}, Signature={signature}")
    return Signed(all_headers, signature, timestamp, scope, key)


def presign_query(creds: Credentials, method: str, host: str, path: str, expires_s: int,
                  when: datetime.datetime | None = None, extra_query=()) -> str:
    """Query string of a presigned URL (X-Amz-* parameters), signed for the host header only."""
    timestamp = amz_date(when or utc_now())
    scope = credential_scope(creds, timestamp)
    query = list(extra_query) + [
        ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
        ("X-Amz-Credential", f"{creds.access_key}/{scope}"),
        ("X-Amz-Date", timestamp),
        ("X-Amz-Expires", str(expires_s)),
        ("X-Amz-SignedHeaders", "host"),
    ]
    canonical_request = "\n".join([method, path, canonical_query(query), f"host:{host}\n", "host",
                                   UNSIGNED_PAYLOAD])
    string_to_sign = "\n".join(["AWS4-HMAC-SHA256", timestamp, scope,
                                sha256_hex(canonical_request.encode())])
    signature = hmac.new(signing_key(creds, timestamp[:8]), string_to_sign.encode(),
                         hashlib.sha256).hexdigest()
    return canonical_query(query + [("X-Amz-Signature", signature)])


# ---------------------------------------------------------------------------------------------------
# aws-chunked bodies
# ---------------------------------------------------------------------------------------------------

def _pieces(data: bytes, chunk_bytes: int) -> list[bytes]:
    assert chunk_bytes > 0
    return [data[i:i + chunk_bytes] for i in range(0, len(data), chunk_bytes)]


def chunk_signature(signed: Signed, previous: str, chunk: bytes) -> str:
    string_to_sign = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", signed.timestamp, signed.scope, previous,
                                EMPTY_SHA256, sha256_hex(chunk)])
    return hmac.new(signed.key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def trailer_signature(signed: Signed, previous: str, trailers) -> str:
    canonical = "".join(f"{name}:{value}\n" for name, value in trailers)
    string_to_sign = "\n".join(["AWS4-HMAC-SHA256-TRAILER", signed.timestamp, signed.scope, previous,
                                sha256_hex(canonical.encode())])
    return hmac.new(signed.key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def aws_chunked_signed(data: bytes, chunk_bytes: int, signed: Signed, trailers=None,
                       tamper_chunk: int | None = None) -> bytes:
    """STREAMING-AWS4-HMAC-SHA256-PAYLOAD(-TRAILER) body. The chain starts at the seed signature.

    tamper_chunk: index of a chunk whose signature is replaced by a wrong one (the chain goes on from
    the correct value, so only that one chunk is wrong).
    """
    out = bytearray()
    previous = signed.signature
    for index, chunk in enumerate(_pieces(data, chunk_bytes) + [b""]):
        signature = chunk_signature(signed, previous, chunk)
        previous = signature
        sent = signature
        if tamper_chunk is not None and index == tamper_chunk:
            sent = ("0" if signature[0] != "0" else "1") + signature[1:]
        out += f"{len(chunk):x};chunk-signature={sent}\r\n".encode()
        if chunk:
            out += chunk + b"\r\n"
    if trailers is None:
        out += b"\r\n"
        return bytes(out)
    for name, value in trailers:
        out += f"{name}:{value}\r\n".encode()
    out += f"x-amz-trailer-signature:{trailer_signature(signed, previous, trailers)}\r\n\r\n".encode()
    return bytes(out)


def aws_chunked_unsigned(data: bytes, chunk_bytes: int, trailers) -> bytes:
    """STREAMING-UNSIGNED-PAYLOAD-TRAILER body, framed the way botocore frames it."""
    out = bytearray()
    for chunk in _pieces(data, chunk_bytes):
        out += f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    out += b"0\r\n"
    for name, value in trailers:
        out += f"{name}:{value}\r\n".encode()
    out += b"\r\n"
    return bytes(out)


# ---------------------------------------------------------------------------------------------------
# S3 XML
# ---------------------------------------------------------------------------------------------------

def parse_xml(text: bytes | str):
    try:
        return ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise AssertionError(f"not an XML document ({error}): {text[:500]!r}") from None


def xml_children(text: bytes | str) -> dict:
    """Top-level children of an XML document, namespace stripped: {tag: text}."""
    root = parse_xml(text)
    return {child.tag.split("}")[-1]: (child.text or "") for child in root}


def xml_root_tag(text: bytes | str) -> str:
    return parse_xml(text).tag.split("}")[-1]


def xml_find_all(text: bytes | str, path: str) -> list[str]:
    """Texts of elements at `path` (tags without namespace, e.g. 'Contents/Key')."""
    root = parse_xml(text)
    ns_path = "/".join(f"{{{S3_XML_NAMESPACE}}}{part}" for part in path.split("/"))
    found = root.findall(ns_path) or root.findall(path)
    return [element.text or "" for element in found]


# ---------------------------------------------------------------------------------------------------
# Raw HTTP/1.1 over a socket
# ---------------------------------------------------------------------------------------------------

@dataclass
class RawResponse:
    status: int
    reason: str
    headers: dict  # lower-case names; repeated headers joined with ", "
    body: bytes


class RawConnection:
    """A plain socket with a buffered reader for HTTP/1.1 responses. Every read has a deadline."""

    def __init__(self, host: str, port: int, timeout_s: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.timeout_s = timeout_s
        self._buffer = bytearray()

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data: bytes):
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(64 * KiB)
        if not chunk:
            return False
        self._buffer += chunk
        return True

    def read_line(self, limit_bytes: int = 64 * KiB) -> bytes:
        while b"\r\n" not in self._buffer:
            if len(self._buffer) > limit_bytes:
                raise AssertionError("response line too long")
            if not self._fill():
                raise ConnectionError("connection closed before a full line: %r" % bytes(self._buffer))
        line, _, rest = bytes(self._buffer).partition(b"\r\n")
        self._buffer = bytearray(rest)
        return line

    def read_exact(self, size_bytes: int) -> bytes:
        while len(self._buffer) < size_bytes:
            if not self._fill():
                raise ConnectionError(f"connection closed after {len(self._buffer)} of {size_bytes} bytes")
        data = bytes(self._buffer[:size_bytes])
        del self._buffer[:size_bytes]
        return data

    def read_head(self) -> RawResponse:
        status_line = self.read_line().decode("latin-1")
        parts = status_line.split(" ", 2)
        assert len(parts) >= 2 and parts[0].startswith("HTTP/1."), f"bad status line {status_line!r}"
        headers: dict = {}
        while True:
            line = self.read_line().decode("latin-1")
            if not line:
                break
            name, _, value = line.partition(":")
            name = name.strip().lower()
            headers[name] = f"{headers[name]}, {value.strip()}" if name in headers else value.strip()
        return RawResponse(int(parts[1]), parts[2] if len(parts) > 2 else "", headers, b"")

    def read_response(self, head_request: bool = False) -> RawResponse:
        """The next final response; interim 1xx responses before it are skipped (RFC 9110 allows
        any number of them). Use read_head() to see an interim response itself."""
        response = self.read_head()
        while 100 <= response.status < 200 and response.status != 101:
            response = self.read_head()
        if head_request or response.status in (204, 304):
            return response
        if "chunked" in response.headers.get("transfer-encoding", "").lower():
            body = bytearray()
            while True:
                size = int(self.read_line().split(b";")[0], 16)
                if size == 0:
                    while self.read_line():
                        pass
                    break
                body += self.read_exact(size)
                assert self.read_exact(2) == b"\r\n"
            response.body = bytes(body)
        elif "content-length" in response.headers:
            response.body = self.read_exact(int(response.headers["content-length"]))
        else:
            response.body = self.read_until_close()
        return response

    def read_until_close(self, deadline_s: float | None = None) -> bytes:
        """Everything up to EOF; raises if EOF does not come within the deadline."""
        end = time.monotonic() + (deadline_s or self.timeout_s)
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("peer did not close the connection")
            self.sock.settimeout(remaining)
            try:
                if not self._fill():
                    break
            except ConnectionResetError:
                break
        data = bytes(self._buffer)
        self._buffer.clear()
        self.sock.settimeout(self.timeout_s)
        return data


def raw_request(method: str, path: str, host: str, headers: dict, body: bytes = b"") -> bytes:
    """Serialise an HTTP/1.1 request. Adds Content-Length when there is a body and none is given."""
    lines = [f"{method} {path} HTTP/1.1"]
    names = {n.lower() for n in headers}
    if "host" not in names:
        lines.append(f"Host: {host}")
    for name, value in headers.items():
        lines.append(f"{name}: {value}")
    if body and "content-length" not in names and "transfer-encoding" not in names:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def wait_until(predicate, timeout_s: float, interval_s: float = 0.05, what: str = "condition"):
    """Poll `predicate` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def url_host(url: str) -> str:
    return urlsplit(url).netloc
