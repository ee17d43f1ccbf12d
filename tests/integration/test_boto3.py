"""The S3 API through boto3, with botocore's default (latest) checksum behaviour."""

import base64
import concurrent.futures
import datetime
import email.header
import hashlib
from urllib.parse import unquote_plus

import pytest
import requests
from botocore.exceptions import ClientError

import s3util
from conftest import empty_and_delete_bucket, unique_bucket_name
from s3util import KiB, MiB


def client_error(excinfo) -> tuple[str, int]:
    response = excinfo.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def raw_etag(response) -> str:
    return response["ResponseMetadata"]["HTTPHeaders"]["etag"]


def read_all(s3, bucket, key, **kwargs) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key, **kwargs)["Body"].read()


def signed_get(server, path: str, query=()):
    """A GET signed by our own SigV4 code, for requests boto3 would rewrite (e.g. listing encodings)."""
    signed = s3util.sign_headers(server.credentials, "GET", server.host, path, query,
                                 payload_hash=s3util.EMPTY_SHA256)
    url = server.endpoint + path + ("?" + s3util.canonical_query(query) if query else "")
    return requests.get(url, headers=signed.headers, timeout=30)


# ---------------------------------------------------------------------------------------------------
# Buckets
# ---------------------------------------------------------------------------------------------------

def test_bucket_create_list_head_location_delete(s3, bucket_name):
    s3.create_bucket(Bucket=bucket_name)
    listed = {b["Name"]: b for b in s3.list_buckets()["Buckets"]}
    assert bucket_name in listed
    created = listed[bucket_name]["CreationDate"]
    now = datetime.datetime.now(datetime.timezone.utc)
    assert abs((now - created).total_seconds()) < 300, created

    assert s3.head_bucket(Bucket=bucket_name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    location = s3.get_bucket_location(Bucket=bucket_name)["LocationConstraint"]
    assert location in (None, "", "us-east-1")

    assert s3.delete_bucket(Bucket=bucket_name)["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as excinfo:
        s3.head_bucket(Bucket=bucket_name)
    assert client_error(excinfo)[1] == 404
    assert bucket_name not in {b["Name"] for b in s3.list_buckets()["Buckets"]}


@pytest.mark.parametrize("name", [
    "ab",                      # too short
    "a" * 64,                  # too long
    "Upper-case-bucket",       # capitals
    "under_score-bucket",      # underscore
    "-leading-hyphen",
    "trailing-hyphen-",
    "double..dot",
    "192.168.10.20",           # formatted as an IP address
])
def test_create_bucket_with_invalid_name_is_rejected(s3, name):
    with pytest.raises(ClientError) as excinfo:
        s3.create_bucket(Bucket=name)
    assert client_error(excinfo) == ("InvalidBucketName", 400)
    assert name not in {b["Name"] for b in s3.list_buckets()["Buckets"]}


def test_delete_non_empty_bucket_fails_with_bucket_not_empty(s3, bucket):
    s3.put_object(Bucket=bucket, Key="keep-me", Body=b"x")
    with pytest.raises(ClientError) as excinfo:
        s3.delete_bucket(Bucket=bucket)
    assert client_error(excinfo) == ("BucketNotEmpty", 409)
    assert s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert read_all(s3, bucket, "keep-me") == b"x"


@pytest.mark.parametrize("operation", ["get_object", "put_object", "list_objects_v2", "delete_bucket",
                                       "get_bucket_location"])
def test_missing_bucket_answers_no_such_bucket(s3, bucket_name, operation):
    kwargs = {"Bucket": bucket_name}
    if operation in ("get_object", "put_object"):
        kwargs["Key"] = "k"
    if operation == "put_object":
        kwargs["Body"] = b"data"
    with pytest.raises(ClientError) as excinfo:
        getattr(s3, operation)(**kwargs)
    assert client_error(excinfo) == ("NoSuchBucket", 404)
    assert bucket_name not in {b["Name"] for b in s3.list_buckets()["Buckets"]}


def test_head_missing_bucket_is_404(s3, bucket_name):
    with pytest.raises(ClientError) as excinfo:
        s3.head_bucket(Bucket=bucket_name)
    assert client_error(excinfo)[1] == 404


# ---------------------------------------------------------------------------------------------------
# Objects
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size_bytes", [
    0, 1, 5 * MiB + 1, pytest.param(100 * MiB, marks=pytest.mark.slow, id="100MiB")])
def test_object_round_trip_is_byte_exact(s3, bucket, rng, size_bytes):
    data = s3util.payload(rng, size_bytes)
    put = s3.put_object(Bucket=bucket, Key="object.bin", Body=data)
    assert put["ResponseMetadata"]["HTTPStatusCode"] == 200

    got = s3.get_object(Bucket=bucket, Key="object.bin")
    assert got["ContentLength"] == size_bytes
    digest, received_bytes = s3util.stream_sha256_hex(got["Body"])
    assert received_bytes == size_bytes
    assert digest == s3util.sha256_hex(data)
    assert got["ETag"] == put["ETag"]
    assert s3.head_object(Bucket=bucket, Key="object.bin")["ContentLength"] == size_bytes


def test_content_type_and_user_metadata_round_trip(s3, bucket):
    metadata = {"colour": "blue", "multi-word": "a b c", "digits-123": "0987"}
    s3.put_object(Bucket=bucket, Key="typed", Body=b"{}", ContentType="application/x-fjord-test",
                  Metadata=metadata)
    head = s3.head_object(Bucket=bucket, Key="typed")
    assert head["ContentType"] == "application/x-fjord-test"
    assert head["Metadata"] == metadata
    got = s3.get_object(Bucket=bucket, Key="typed")
    assert got["ContentType"] == "application/x-fjord-test"
    assert got["Metadata"] == metadata
    assert got["Body"].read() == b"{}"


def test_non_ascii_user_metadata_is_answered_as_rfc_2047_words(fjord_server, s3, bucket):
    """S3 decodes MIME encoded words in metadata values before storing them and encodes values that are
    not US-ASCII when answering; botocore sends only ASCII, so raw UTF-8 goes by a signed request."""
    s3.put_object(Bucket=bucket, Key="b", Body=b"x", Metadata={
        "b-word": "=?UTF-8?B?Y2Fmw6k=?=", "q-word": "=?utf-8?q?caf=C3=A9_au_lait?=",
        "looks-encoded": "=?not a word", "plain": "ascii only"})
    meta = s3.head_object(Bucket=bucket, Key="b")["Metadata"]
    assert meta == {"b-word": "=?UTF-8?B?Y2Fmw6k=?=", "q-word": "=?UTF-8?B?Y2Fmw6kgYXUgbGFpdA==?=",
                    "looks-encoded": "=?not a word", "plain": "ascii only"}
    value = "grüße, 東京 ✓"
    signed = s3util.sign_headers(fjord_server.credentials, "PUT", fjord_server.host, f"/{bucket}/raw",
                                 headers={"x-amz-meta-city": value},
                                 payload_hash=hashlib.sha256(b"r").hexdigest())
    sent = dict(signed.headers)
    sent["x-amz-meta-city"] = value.encode("utf-8")
    assert requests.put(f"{fjord_server.endpoint}/{bucket}/raw", data=b"r", headers=sent,
                        timeout=10).status_code == 200
    answered = s3.get_object(Bucket=bucket, Key="raw")["Metadata"]["city"]
    assert answered.isascii() and answered.startswith("=?UTF-8?B?")
    words = email.header.decode_header(answered)
    assert words[0][0].decode(words[0][1]) == value
    # A word that decodes to CR LF is answered encoded: it never splits the response
    hostile = "=?UTF-8?B?" + base64.b64encode(b"a\r\nx-evil: 1").decode() + "?="
    s3.put_object(Bucket=bucket, Key="hostile", Body=b"h", Metadata={"evil": hostile})
    head = s3.head_object(Bucket=bucket, Key="hostile")
    assert head["Metadata"] == {"evil": hostile}
    assert "x-evil" not in head["ResponseMetadata"]["HTTPHeaders"]
    # A copy keeps the stored value, and encodes it the same way
    s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "raw"})
    assert s3.head_object(Bucket=bucket, Key="copy")["Metadata"]["city"] == answered


def test_overwrite_replaces_content_and_etag(s3, bucket, rng):
    first, second = s3util.payload(rng, 3000), s3util.payload(rng, 1234)
    etag_first = s3.put_object(Bucket=bucket, Key="k", Body=first)["ETag"]
    etag_second = s3.put_object(Bucket=bucket, Key="k", Body=second)["ETag"]
    assert etag_first != etag_second
    got = s3.get_object(Bucket=bucket, Key="k")
    assert got["Body"].read() == second
    assert got["ContentLength"] == len(second)
    assert got["ETag"] == etag_second


def test_etag_is_quoted_and_stable(s3, bucket, rng):
    data = s3util.payload(rng, 10 * KiB)
    put = s3.put_object(Bucket=bucket, Key="stable", Body=data)
    header = raw_etag(put)
    assert len(header) > 2 and header.startswith('"') and header.endswith('"')
    heads = [s3.head_object(Bucket=bucket, Key="stable")["ETag"] for _ in range(2)]
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"][0]["ETag"]
    got = s3.get_object(Bucket=bucket, Key="stable")
    got["Body"].read()
    assert heads == [put["ETag"], put["ETag"]]
    assert listed == put["ETag"]
    assert got["ETag"] == put["ETag"]


def test_content_md5_is_verified_and_becomes_the_etag(s3, bucket, rng):
    data = s3util.payload(rng, 64 * KiB)
    put = s3.put_object(Bucket=bucket, Key="md5", Body=data, ContentMD5=s3util.md5_b64(data))
    assert put["ETag"] == f'"{s3util.md5_hex(data)}"'
    assert s3.head_object(Bucket=bucket, Key="md5")["ETag"] == put["ETag"]


def test_wrong_content_md5_is_bad_digest_and_nothing_is_stored(s3, bucket, rng):
    data = s3util.payload(rng, 64 * KiB)
    with pytest.raises(ClientError) as excinfo:
        s3.put_object(Bucket=bucket, Key="bad-md5", Body=data, ContentMD5=s3util.md5_b64(data + b"!"))
    assert client_error(excinfo) == ("BadDigest", 400)
    with pytest.raises(ClientError) as excinfo:
        s3.head_object(Bucket=bucket, Key="bad-md5")
    assert client_error(excinfo)[1] == 404


def test_etag_md5_option_makes_etag_the_md5(make_server, rng):
    server = make_server(extra_args=["--etag-md5"], name="fjord-etag-md5")
    s3 = server.client()
    bucket = unique_bucket_name("etag-md5")
    s3.create_bucket(Bucket=bucket)
    for size_bytes in (0, 1, 100 * KiB + 7):
        data = s3util.payload(rng, size_bytes)
        put = s3.put_object(Bucket=bucket, Key=f"k{size_bytes}", Body=data)
        assert put["ETag"] == f'"{s3util.md5_hex(data)}"', size_bytes
        assert s3.head_object(Bucket=bucket, Key=f"k{size_bytes}")["ETag"] == put["ETag"]


def test_delete_object_then_get_is_no_such_key(s3, bucket):
    s3.put_object(Bucket=bucket, Key="doomed", Body=b"bye")
    deleted = s3.delete_object(Bucket=bucket, Key="doomed")
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="doomed")
    assert client_error(excinfo) == ("NoSuchKey", 404)
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_delete_missing_key_is_204(s3, bucket):
    deleted = s3.delete_object(Bucket=bucket, Key="never-existed")
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204


def test_head_object_fields(s3, bucket, rng):
    data = s3util.payload(rng, 4321)
    before = datetime.datetime.now(datetime.timezone.utc)
    put = s3.put_object(Bucket=bucket, Key="headed", Body=data, ContentType="text/plain",
                        Metadata={"k": "v"})
    head = s3.head_object(Bucket=bucket, Key="headed")
    assert head["ContentLength"] == 4321
    assert head["ETag"] == put["ETag"]
    assert head["ContentType"] == "text/plain"
    assert head["Metadata"] == {"k": "v"}
    skew = (head["LastModified"] - before).total_seconds()
    assert -5 <= skew <= 300, head["LastModified"]
    headers = head["ResponseMetadata"]["HTTPHeaders"]
    assert headers["content-length"] == "4321"
    datetime.datetime.strptime(headers["last-modified"], "%a, %d %b %Y %H:%M:%S GMT")
    assert headers.get("x-amz-request-id")


def test_head_missing_key_is_404(s3, bucket):
    with pytest.raises(ClientError) as excinfo:
        s3.head_object(Bucket=bucket, Key="nope")
    assert client_error(excinfo)[1] == 404


# ---------------------------------------------------------------------------------------------------
# Ranges and conditionals
# ---------------------------------------------------------------------------------------------------

RANGE_OBJECT_BYTES = 10_000


@pytest.mark.parametrize("range_header,first,last", [
    ("bytes=0-9", 0, 9),
    ("bytes=4000-5999", 4000, 5999),
    ("bytes=-100", RANGE_OBJECT_BYTES - 100, RANGE_OBJECT_BYTES - 1),
    ("bytes=9000-", 9000, RANGE_OBJECT_BYTES - 1),
    ("bytes=9990-20000", 9990, RANGE_OBJECT_BYTES - 1),     # end past the object is clamped
    ("bytes=-20000", 0, RANGE_OBJECT_BYTES - 1),            # suffix longer than the object
    ("bytes=9999-9999", 9999, 9999),
])
def test_range_get_returns_206_and_the_slice(s3, bucket, rng, range_header, first, last):
    data = s3util.payload(rng, RANGE_OBJECT_BYTES)
    s3.put_object(Bucket=bucket, Key="ranged", Body=data)
    got = s3.get_object(Bucket=bucket, Key="ranged", Range=range_header)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["ContentRange"] == f"bytes {first}-{last}/{RANGE_OBJECT_BYTES}"
    assert got["ContentLength"] == last - first + 1
    assert got["Body"].read() == data[first:last + 1]


@pytest.mark.parametrize("range_header", [f"bytes={RANGE_OBJECT_BYTES}-",
                                          f"bytes={RANGE_OBJECT_BYTES + 5}-{RANGE_OBJECT_BYTES + 10}"])
def test_unsatisfiable_range_is_416_invalid_range(s3, bucket, rng, range_header):
    s3.put_object(Bucket=bucket, Key="ranged", Body=s3util.payload(rng, RANGE_OBJECT_BYTES))
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="ranged", Range=range_header)
    assert client_error(excinfo) == ("InvalidRange", 416)
    # As S3: the error names the range and the object's size (AWS CRT clients rely on ActualObjectSize).
    assert excinfo.value.response["Error"]["ActualObjectSize"] == str(RANGE_OBJECT_BYTES)
    assert excinfo.value.response["Error"]["RangeRequested"] == range_header


def test_ranged_get_of_an_empty_object_says_its_size_is_zero(s3, bucket):
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="empty", Range="bytes=0-8388607")
    assert client_error(excinfo) == ("InvalidRange", 416)
    assert excinfo.value.response["Error"]["ActualObjectSize"] == "0"


@pytest.fixture
def conditional_object(s3, bucket):
    s3.put_object(Bucket=bucket, Key="cond", Body=b"conditional body")
    head = s3.head_object(Bucket=bucket, Key="cond")
    return bucket, head["ETag"], head["LastModified"]


def test_if_match(s3, conditional_object):
    bucket, etag, _ = conditional_object
    assert read_all(s3, bucket, "cond", IfMatch=etag) == b"conditional body"
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="cond", IfMatch='"0123456789abcdef0123456789abcdef"')
    assert client_error(excinfo) == ("PreconditionFailed", 412)


def test_if_none_match(s3, conditional_object):
    bucket, etag, _ = conditional_object
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="cond", IfNoneMatch=etag)
    assert client_error(excinfo)[1] == 304
    with pytest.raises(ClientError) as excinfo:
        s3.head_object(Bucket=bucket, Key="cond", IfNoneMatch=etag)
    assert client_error(excinfo)[1] == 304
    assert read_all(s3, bucket, "cond", IfNoneMatch='"some-other-etag"') == b"conditional body"


def test_if_modified_since(s3, conditional_object):
    bucket, _, last_modified = conditional_object
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="cond", IfModifiedSince=last_modified)
    assert client_error(excinfo)[1] == 304
    earlier = last_modified - datetime.timedelta(days=1)
    assert read_all(s3, bucket, "cond", IfModifiedSince=earlier) == b"conditional body"


def test_if_unmodified_since(s3, conditional_object):
    bucket, _, last_modified = conditional_object
    earlier = last_modified - datetime.timedelta(days=1)
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="cond", IfUnmodifiedSince=earlier)
    assert client_error(excinfo) == ("PreconditionFailed", 412)
    assert read_all(s3, bucket, "cond", IfUnmodifiedSince=last_modified) == b"conditional body"


# ---------------------------------------------------------------------------------------------------
# Listing
# ---------------------------------------------------------------------------------------------------

LIST_DIRS = 20
LIST_FILES_PER_DIR = 95
LIST_TOP_LEVEL = 100


@pytest.fixture(scope="module")
def listing_bucket(s3):
    """2,000 keys: dir00/file000 .. dir19/file094 and top000 .. top099. Shared by the listing tests."""
    bucket = unique_bucket_name("listing")
    s3.create_bucket(Bucket=bucket)
    keys = [f"dir{d:02d}/file{f:03d}" for d in range(LIST_DIRS) for f in range(LIST_FILES_PER_DIR)]
    keys += [f"top{i:03d}" for i in range(LIST_TOP_LEVEL)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=k.encode()), keys))
    yield bucket, sorted(keys)
    empty_and_delete_bucket(s3, bucket)


def list_v2_all(s3, bucket, **kwargs):
    """Every page of a ListObjectsV2, checking the per-page invariants on the way."""
    pages, token = [], None
    while True:
        args = dict(kwargs, Bucket=bucket)
        if token:
            args["ContinuationToken"] = token
        page = s3.list_objects_v2(**args)
        entries = len(page.get("Contents", [])) + len(page.get("CommonPrefixes", []))
        assert page["KeyCount"] == entries
        if "MaxKeys" in kwargs:
            assert entries <= kwargs["MaxKeys"]
        pages.append(page)
        assert len(pages) <= 1000, "pagination does not end"
        if not page["IsTruncated"]:
            assert "NextContinuationToken" not in page
            return pages
        token = page["NextContinuationToken"]
        assert token


def keys_of(pages):
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def prefixes_of(pages):
    return [p["Prefix"] for page in pages for p in page.get("CommonPrefixes", [])]


def test_list_v2_pagination_returns_every_key_once_in_order(s3, listing_bucket):
    bucket, keys = listing_bucket
    pages = list_v2_all(s3, bucket, MaxKeys=137)
    assert keys_of(pages) == keys
    assert len(pages) == -(-len(keys) // 137)
    assert all(len(page["Contents"]) == 137 for page in pages[:-1])


def test_list_v2_default_page_is_1000_keys(s3, listing_bucket):
    bucket, keys = listing_bucket
    page = s3.list_objects_v2(Bucket=bucket)
    assert page["IsTruncated"] is True
    assert page["KeyCount"] == 1000
    assert [item["Key"] for item in page["Contents"]] == keys[:1000]
    item = page["Contents"][0]
    assert item["Size"] == len(item["Key"])
    assert item["ETag"].startswith('"')


def test_list_v2_delimiter_groups_common_prefixes(s3, listing_bucket):
    bucket, keys = listing_bucket
    expected_prefixes = [f"dir{d:02d}/" for d in range(LIST_DIRS)]
    expected_keys = [k for k in keys if "/" not in k]
    pages = list_v2_all(s3, bucket, Delimiter="/")
    assert len(pages) == 1
    assert prefixes_of(pages) == expected_prefixes
    assert keys_of(pages) == expected_keys
    paged = list_v2_all(s3, bucket, Delimiter="/", MaxKeys=7)
    assert prefixes_of(paged) == expected_prefixes
    assert keys_of(paged) == expected_keys


def test_list_v2_prefix(s3, listing_bucket):
    bucket, keys = listing_bucket
    pages = list_v2_all(s3, bucket, Prefix="dir07/")
    assert keys_of(pages) == [k for k in keys if k.startswith("dir07/")]
    assert len(keys_of(pages)) == LIST_FILES_PER_DIR
    nested = list_v2_all(s3, bucket, Prefix="dir0", Delimiter="/")
    assert prefixes_of(nested) == [f"dir0{d}/" for d in range(10)]
    assert keys_of(nested) == []
    none = s3.list_objects_v2(Bucket=bucket, Prefix="no-such-prefix")
    assert none["KeyCount"] == 0 and "Contents" not in none and none["IsTruncated"] is False


def test_list_v2_start_after(s3, listing_bucket):
    bucket, keys = listing_bucket
    pages = list_v2_all(s3, bucket, StartAfter="dir10/file050", MaxKeys=400)
    assert keys_of(pages) == [k for k in keys if k > "dir10/file050"]
    between = list_v2_all(s3, bucket, StartAfter="dir10/file050x")  # not itself a key
    assert keys_of(between) == [k for k in keys if k > "dir10/file050x"]


def test_list_v1_marker_pagination(s3, listing_bucket):
    bucket, keys = listing_bucket
    seen, marker = [], None
    for _ in range(100):
        page = s3.list_objects(Bucket=bucket, MaxKeys=300, **({"Marker": marker} if marker else {}))
        batch = [item["Key"] for item in page.get("Contents", [])]
        assert len(batch) <= 300
        seen += batch
        if not page["IsTruncated"]:
            break
        marker = page.get("NextMarker") or batch[-1]
    assert seen == keys


def test_list_v1_delimiter_pages_with_next_marker(s3, listing_bucket):
    bucket, keys = listing_bucket
    prefixes, contents, marker = [], [], None
    for _ in range(100):
        page = s3.list_objects(Bucket=bucket, MaxKeys=7, Delimiter="/",
                               **({"Marker": marker} if marker else {}))
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        contents += [item["Key"] for item in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        marker = page["NextMarker"]  # required with a delimiter
    assert prefixes == [f"dir{d:02d}/" for d in range(LIST_DIRS)]
    assert contents == [k for k in keys if "/" not in k]


ODD_KEYS = [
    "with space",
    "plus+sign",
    "dir with space/inner+plus",
    "unicode-ü-ß-日本語",
    "emoji-😀",
    "percent%41literal",
    "xml<&>'\"chars",
    "tilde~star*paren()",
    "trailing space ",
    "semi;colon,comma=equals?question#hash",
]


@pytest.fixture
def odd_keys_bucket(s3, bucket):
    for key in ODD_KEYS:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    return bucket


def test_odd_keys_round_trip_through_boto3(s3, odd_keys_bucket):
    # boto3 asks for encoding-type=url on every listing and decodes the answer itself.
    listed = keys_of(list_v2_all(s3, odd_keys_bucket))
    assert listed == sorted(ODD_KEYS)
    for key in ODD_KEYS:
        assert read_all(s3, odd_keys_bucket, key) == key.encode(), key


def test_list_v2_encoding_type_url_encodes_keys(fjord_server, odd_keys_bucket):
    response = signed_get(fjord_server, s3util.object_path(odd_keys_bucket),
                          [("list-type", "2"), ("encoding-type", "url")])
    assert response.status_code == 200, response.text
    assert s3util.xml_children(response.content).get("EncodingType") == "url"
    raw_keys = s3util.xml_find_all(response.content, "Contents/Key")
    for raw in raw_keys:
        assert raw.isascii() and " " not in raw and "<" not in raw, raw
    assert [unquote_plus(raw) for raw in raw_keys] == sorted(ODD_KEYS)

    response = signed_get(fjord_server, s3util.object_path(odd_keys_bucket),
                          [("list-type", "2"), ("encoding-type", "url"), ("delimiter", "/")])
    raw_prefixes = s3util.xml_find_all(response.content, "CommonPrefixes/Prefix")
    assert [unquote_plus(raw) for raw in raw_prefixes] == ["dir with space/"]
    assert all(" " not in raw for raw in raw_prefixes)


def test_list_v2_without_encoding_returns_keys_verbatim(fjord_server, odd_keys_bucket):
    response = signed_get(fjord_server, s3util.object_path(odd_keys_bucket), [("list-type", "2")])
    assert response.status_code == 200, response.text
    assert s3util.xml_find_all(response.content, "Contents/Key") == sorted(ODD_KEYS)


def test_list_v1_encoding_type_url(fjord_server, odd_keys_bucket):
    response = signed_get(fjord_server, s3util.object_path(odd_keys_bucket), [("encoding-type", "url")])
    assert response.status_code == 200, response.text
    raw_keys = s3util.xml_find_all(response.content, "Contents/Key")
    assert all(raw.isascii() and " " not in raw for raw in raw_keys), raw_keys
    assert [unquote_plus(raw) for raw in raw_keys] == sorted(ODD_KEYS)


# ---------------------------------------------------------------------------------------------------
# Request shapes the command-line clients use
# ---------------------------------------------------------------------------------------------------

def signed_call(server, method, path, query=(), body=b""):
    signed = s3util.sign_headers(server.credentials, method, server.host, path, query,
                                 payload_hash=s3util.sha256_hex(body))
    url = server.endpoint + path + ("?" + s3util.canonical_query(query) if query else "")
    return requests.request(method, url, headers=signed.headers, data=body, timeout=30)


def test_bucket_paths_with_trailing_slash(fjord_server, s3, bucket_name):
    """s3cmd addresses buckets as '/<bucket>/' (mb, ls, rb): that is the bucket, not an empty key."""
    try:
        assert signed_call(fjord_server, "PUT", f"/{bucket_name}/").status_code == 200
        assert s3.head_bucket(Bucket=bucket_name)["ResponseMetadata"]["HTTPStatusCode"] == 200
        s3.put_object(Bucket=bucket_name, Key="d/k", Body=b"v")
        listing = signed_call(fjord_server, "GET", f"/{bucket_name}/", [("delimiter", "/")])
        assert listing.status_code == 200, listing.text
        assert s3util.xml_find_all(listing.content, "CommonPrefixes/Prefix") == ["d/"]
        s3.delete_object(Bucket=bucket_name, Key="d/k")
        assert signed_call(fjord_server, "DELETE", f"/{bucket_name}/").status_code == 204
        assert bucket_name not in {b["Name"] for b in s3.list_buckets()["Buckets"]}
    finally:
        empty_and_delete_bucket(s3, bucket_name)


def test_empty_list_parameters_mean_absent(fjord_server, s3, bucket):
    """rclone lists with 'delimiter=&max-keys=1000&prefix=', the aws CLI with 'prefix=&delimiter=/'."""
    for key in ("a/1", "a/2", "b"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    v1 = signed_call(fjord_server, "GET", s3util.object_path(bucket),
                     [("delimiter", ""), ("max-keys", "1000"), ("prefix", "")])
    assert v1.status_code == 200, v1.text
    assert s3util.xml_find_all(v1.content, "Contents/Key") == ["a/1", "a/2", "b"]
    v2 = signed_call(fjord_server, "GET", s3util.object_path(bucket),
                     [("list-type", "2"), ("prefix", ""), ("delimiter", "/"), ("encoding-type", "url")])
    assert v2.status_code == 200, v2.text
    assert s3util.xml_find_all(v2.content, "Contents/Key") == ["b"]
    assert s3util.xml_find_all(v2.content, "CommonPrefixes/Prefix") == ["a/"]


def test_put_with_acl_and_storage_class_headers(s3, bucket):
    """rclone sends x-amz-acl: private, s3cmd x-amz-storage-class: STANDARD; both must be accepted."""
    s3.put_object(Bucket=bucket, Key="acl", Body=b"acl body", ACL="private", StorageClass="STANDARD")
    assert read_all(s3, bucket, "acl") == b"acl body"


# ---------------------------------------------------------------------------------------------------
# Virtual-hosted-style addressing
# ---------------------------------------------------------------------------------------------------

def test_virtual_hosted_style_requests(s3, s3_virtual, bucket_name, rng):
    data = s3util.payload(rng, 70 * KiB)
    s3_virtual.create_bucket(Bucket=bucket_name)
    try:
        assert s3.head_bucket(Bucket=bucket_name)["ResponseMetadata"]["HTTPStatusCode"] == 200
        put = s3_virtual.put_object(Bucket=bucket_name, Key="dir/virtual key", Body=data)
        assert read_all(s3, bucket_name, "dir/virtual key") == data
        got = s3_virtual.get_object(Bucket=bucket_name, Key="dir/virtual key")
        assert got["Body"].read() == data and got["ETag"] == put["ETag"]
        listed = s3_virtual.list_objects_v2(Bucket=bucket_name)
        assert [item["Key"] for item in listed["Contents"]] == ["dir/virtual key"]
        assert s3_virtual.head_object(Bucket=bucket_name, Key="dir/virtual key")["ContentLength"] == len(data)
        s3_virtual.delete_object(Bucket=bucket_name, Key="dir/virtual key")
        assert s3.list_objects_v2(Bucket=bucket_name)["KeyCount"] == 0
    finally:
        empty_and_delete_bucket(s3, bucket_name)


def test_virtual_hosted_request_carries_bucket_in_host_only(fjord_server, s3, bucket, rng):
    """A hand-made request: path '/key', Host '<bucket>.localhost:port', signed over that Host."""
    data = s3util.payload(rng, 100)
    s3.put_object(Bucket=bucket, Key="vh", Body=data)
    host = f"{bucket}.localhost:{fjord_server.port}"
    signed = s3util.sign_headers(fjord_server.credentials, "GET", host, "/vh",
                                 payload_hash=s3util.EMPTY_SHA256)
    response = requests.get(f"{fjord_server.endpoint}/vh", headers=signed.headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.content == data
    assert hashlib.sha256(response.content).hexdigest() == s3util.sha256_hex(data)
