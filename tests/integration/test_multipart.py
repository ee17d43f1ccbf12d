"""Multipart upload through boto3: round trips with odd part layouts, ETags, listings, checksums
(COMPOSITE and FULL_OBJECT), every error the protocol names, space reclaimed on a private server,
and the expiry of stale uploads. Each boto3 test runs with botocore's default checksum settings and
with `when_required` for both request calculation and response validation."""

import xml.sax.saxutils

import pytest
from botocore.exceptions import ClientError

import s3util
from multipart_support import (MIN_PART_BYTES, client_error, complete, composite_checksum, data_file_count,
                               error_code, full_object_crc32, full_object_crc64nvme, multipart_etag,
                               multipart_put, signed_request, start_upload, upload_parts,
                               wait_for_file_count)
from s3util import KiB, MiB


@pytest.fixture(scope="module", params=["default", "when_required"])
def mp_s3(request, fjord_server):
    if request.param == "default":
        return fjord_server.client()
    return fjord_server.client(request_checksum_calculation="when_required",
                               response_checksum_validation="when_required")


def read_all(s3, bucket, key, **kwargs) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key, **kwargs)["Body"].read()


# ---------------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sizes", [
    pytest.param([MIN_PART_BYTES + 123, 6 * MiB - 1, 1], id="unequal-last-1-byte"),
    pytest.param([MIN_PART_BYTES, MIN_PART_BYTES, 300 * KiB + 7], id="equal-then-small"),
    pytest.param([777], id="one-small-part"),
])
def test_round_trip_is_byte_exact(mp_s3, bucket, rng, sizes):
    parts = [s3util.payload(rng, size) for size in sizes]
    whole = b"".join(parts)
    done, listed = multipart_put(mp_s3, bucket, "mp/obj.bin", parts)
    assert done["ETag"] == multipart_etag([p["ETag"] for p in listed])
    assert done["ETag"].endswith(f'-{len(parts)}"')
    assert done["Key"] == "mp/obj.bin" and done["Bucket"] == bucket

    head = mp_s3.head_object(Bucket=bucket, Key="mp/obj.bin")
    assert head["ContentLength"] == len(whole)
    assert head["ETag"] == done["ETag"]
    got = mp_s3.get_object(Bucket=bucket, Key="mp/obj.bin")
    assert got["ETag"] == done["ETag"]
    assert got["Body"].read() == whole
    listing = mp_s3.list_objects_v2(Bucket=bucket, Prefix="mp/")["Contents"]
    assert [(o["Key"], o["Size"], o["ETag"]) for o in listing] == [("mp/obj.bin", len(whole), done["ETag"])]


def test_ranges_across_part_boundaries(mp_s3, bucket, rng):
    sizes = [MIN_PART_BYTES + 1, MIN_PART_BYTES + 3, 2]
    parts = [s3util.payload(rng, size) for size in sizes]
    whole = b"".join(parts)
    multipart_put(mp_s3, bucket, "ranges.bin", parts)
    first_end = sizes[0]
    second_end = sizes[0] + sizes[1]
    for first, last in [(first_end - 1, first_end),            # last byte of part 1, first of 2
                        (first_end - 10, second_end + 1),       # spans all three parts
                        (second_end - 1, len(whole) - 1),       # into the 2-byte last part
                        (0, len(whole) - 1),
                        (first_end, first_end),                 # exactly the first byte of part 2
                        (len(whole) - 1, len(whole) - 1)]:
        got = mp_s3.get_object(Bucket=bucket, Key="ranges.bin", Range=f"bytes={first}-{last}")
        assert got["ContentRange"] == f"bytes {first}-{last}/{len(whole)}"
        assert got["Body"].read() == whole[first:last + 1], (first, last)
    suffix = mp_s3.get_object(Bucket=bucket, Key="ranges.bin", Range="bytes=-5")["Body"].read()
    assert suffix == whole[-5:]
    open_ended = mp_s3.get_object(Bucket=bucket, Key="ranges.bin", Range=f"bytes={first_end - 3}-")
    assert open_ended["Body"].read() == whole[first_end - 3:]


def test_parts_may_be_uploaded_out_of_order_and_replaced(mp_s3, bucket, rng):
    parts = [s3util.payload(rng, MIN_PART_BYTES), s3util.payload(rng, 1000)]
    upload_id = start_upload(mp_s3, bucket, "order.bin")
    second = upload_parts(mp_s3, bucket, "order.bin", upload_id, [b"stale second part"], first_number=2)
    first = upload_parts(mp_s3, bucket, "order.bin", upload_id, parts[:1])
    second_again = upload_parts(mp_s3, bucket, "order.bin", upload_id, parts[1:], first_number=2)
    assert second_again[0]["ETag"] != second[0]["ETag"]

    listed = mp_s3.list_parts(Bucket=bucket, Key="order.bin", UploadId=upload_id)
    assert [(p["PartNumber"], p["Size"], p["ETag"]) for p in listed["Parts"]] == [
        (1, MIN_PART_BYTES, first[0]["ETag"]), (2, 1000, second_again[0]["ETag"])]
    complete(mp_s3, bucket, "order.bin", upload_id, first + second_again)
    assert read_all(mp_s3, bucket, "order.bin") == b"".join(parts)


def test_list_parts_pages_and_list_multipart_uploads(mp_s3, bucket):
    upload_id = start_upload(mp_s3, bucket, "dir/listed.bin")
    other_id = start_upload(mp_s3, bucket, "other.bin")
    parts = upload_parts(mp_s3, bucket, "dir/listed.bin", upload_id, [bytes([n]) * 10 for n in range(1, 6)])

    page = mp_s3.list_parts(Bucket=bucket, Key="dir/listed.bin", UploadId=upload_id, MaxParts=2)
    assert [p["PartNumber"] for p in page["Parts"]] == [1, 2]
    assert page["IsTruncated"] and page["NextPartNumberMarker"] == 2
    rest = mp_s3.list_parts(Bucket=bucket, Key="dir/listed.bin", UploadId=upload_id,
                            PartNumberMarker=2)
    assert [p["PartNumber"] for p in rest["Parts"]] == [3, 4, 5]
    assert not rest["IsTruncated"]
    assert [p["ETag"] for p in page["Parts"] + rest["Parts"]] == [p["ETag"] for p in parts]

    uploads = mp_s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert sorted((u["Key"], u["UploadId"]) for u in uploads) == sorted(
        [("dir/listed.bin", upload_id), ("other.bin", other_id)])
    prefixed = mp_s3.list_multipart_uploads(Bucket=bucket, Prefix="dir/")["Uploads"]
    assert [u["UploadId"] for u in prefixed] == [upload_id]
    delimited = mp_s3.list_multipart_uploads(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in delimited.get("CommonPrefixes", [])] == ["dir/"]
    assert [u["Key"] for u in delimited["Uploads"]] == ["other.bin"]

    complete(mp_s3, bucket, "dir/listed.bin", upload_id, parts[:1])
    mp_s3.abort_multipart_upload(Bucket=bucket, Key="other.bin", UploadId=other_id)
    assert mp_s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_metadata_given_at_create_is_persisted_and_overridable_on_get(mp_s3, bucket, rng):
    data = s3util.payload(rng, 4096)
    multipart_put(mp_s3, bucket, "meta.bin", [data], create_kwargs=dict(
        ContentType="application/x-fjord-multipart", ContentEncoding="identity",
        ContentDisposition='attachment; filename="meta.bin"', ContentLanguage="nb-NO",
        CacheControl="max-age=60", Expires="Wed, 21 Oct 2037 07:28:00 GMT",
        Metadata={"owner": "fjord", "kind": "multipart"}))
    head = mp_s3.head_object(Bucket=bucket, Key="meta.bin")
    assert head["ContentType"] == "application/x-fjord-multipart"
    assert head["ContentEncoding"] == "identity"
    assert head["ContentDisposition"] == 'attachment; filename="meta.bin"'
    assert head["ContentLanguage"] == "nb-NO"
    assert head["CacheControl"] == "max-age=60"
    assert head["ResponseMetadata"]["HTTPHeaders"]["expires"] == "Wed, 21 Oct 2037 07:28:00 GMT"
    assert head["Metadata"] == {"owner": "fjord", "kind": "multipart"}
    got = mp_s3.get_object(Bucket=bucket, Key="meta.bin", ResponseContentType="text/plain",
                           ResponseCacheControl="no-store")
    assert got["ContentType"] == "text/plain" and got["CacheControl"] == "no-store"
    assert got["Body"].read() == data


# ---------------------------------------------------------------------------------------------------
# Checksums
# ---------------------------------------------------------------------------------------------------

def test_crc32_composite_checksum(mp_s3, bucket, rng):
    parts = [s3util.payload(rng, MIN_PART_BYTES + 11), s3util.payload(rng, 99)]
    checksums = [s3util.CHECKSUM_VALUE["crc32"](p) for p in parts]
    upload_id = start_upload(mp_s3, bucket, "composite.bin", ChecksumAlgorithm="CRC32")
    listed = []
    for number, (data, value) in enumerate(zip(parts, checksums), start=1):
        response = mp_s3.upload_part(Bucket=bucket, Key="composite.bin", UploadId=upload_id,
                                     PartNumber=number, Body=data, ChecksumCRC32=value)
        assert response["ChecksumCRC32"] == value
        listed.append({"PartNumber": number, "ETag": response["ETag"], "ChecksumCRC32": value})
    in_list = mp_s3.list_parts(Bucket=bucket, Key="composite.bin", UploadId=upload_id)
    assert in_list["ChecksumAlgorithm"] == "CRC32"
    assert [p["ChecksumCRC32"] for p in in_list["Parts"]] == checksums

    expected = composite_checksum("crc32", parts)
    done = complete(mp_s3, bucket, "composite.bin", upload_id, listed)
    assert done["ChecksumCRC32"] == expected
    assert done["ChecksumType"] == "COMPOSITE"
    head = mp_s3.head_object(Bucket=bucket, Key="composite.bin", ChecksumMode="ENABLED")
    assert head["ChecksumCRC32"] == expected
    got = mp_s3.get_object(Bucket=bucket, Key="composite.bin", ChecksumMode="ENABLED")
    assert got["ChecksumCRC32"] == expected
    assert got["Body"].read() == b"".join(parts)
    # HeadObject and GetObject name the checksum type (x-amz-checksum-type), as S3 does.
    assert head.get("ChecksumType") == "COMPOSITE"
    assert got.get("ChecksumType") == "COMPOSITE"


@pytest.mark.parametrize("algorithm", ["CRC32", "SHA1", "SHA256"])
def test_complete_takes_the_composite_checksum_in_the_form_s3_returns(mp_s3, bucket, rng, algorithm):
    """x-amz-checksum-<algorithm> on CompleteMultipartUpload names the object's checksum: accepted in
    S3's own form ("<base64>-<parts>") and without the part count when it matches; a wrong one is
    BadDigest and completes nothing."""
    name = algorithm.lower()
    field = f"Checksum{algorithm}"
    parts = [s3util.payload(rng, MIN_PART_BYTES + 7), s3util.payload(rng, 1000)]
    expected = composite_checksum(name, parts)
    for key, named in (("with-count.bin", expected), ("without-count.bin", expected.rsplit("-", 1)[0])):
        upload_id = start_upload(mp_s3, bucket, key, ChecksumAlgorithm=algorithm)
        listed = upload_parts(mp_s3, bucket, key, upload_id, parts, ChecksumAlgorithm=algorithm)
        wrong = s3util.CHECKSUM_VALUE[name](b"other bytes") + "-2"
        with pytest.raises(ClientError) as excinfo:
            complete(mp_s3, bucket, key, upload_id, listed, **{field: wrong})
        assert client_error(excinfo) == ("BadDigest", 400)
        assert "Contents" not in mp_s3.list_objects_v2(Bucket=bucket, Prefix=key)
        done = complete(mp_s3, bucket, key, upload_id, listed, **{field: named})
        assert done[field] == expected
        assert read_all(mp_s3, bucket, key) == b"".join(parts)


@pytest.mark.parametrize("algorithm", ["CRC64NVME", "CRC32"])
def test_full_object_checksum_is_crc_of_whole_object(mp_s3, bucket, rng, algorithm):
    parts = [s3util.payload(rng, MIN_PART_BYTES + 5), s3util.payload(rng, 64 * KiB + 3)]
    whole = b"".join(parts)
    name = algorithm.lower()
    field = f"Checksum{algorithm}"
    expected = full_object_crc64nvme(whole) if algorithm == "CRC64NVME" else full_object_crc32(whole)
    upload_id = start_upload(mp_s3, bucket, "full.bin", ChecksumAlgorithm=algorithm,
                             ChecksumType="FULL_OBJECT")
    listed = []
    for number, data in enumerate(parts, start=1):
        value = s3util.CHECKSUM_VALUE[name](data)
        response = mp_s3.upload_part(Bucket=bucket, Key="full.bin", UploadId=upload_id,
                                     PartNumber=number, Body=data, **{field: value})
        listed.append({"PartNumber": number, "ETag": response["ETag"], field: value})
    done = complete(mp_s3, bucket, "full.bin", upload_id, listed)
    assert done[field] == expected
    assert done["ChecksumType"] == "FULL_OBJECT"
    head = mp_s3.head_object(Bucket=bucket, Key="full.bin", ChecksumMode="ENABLED")
    assert head[field] == expected
    got = mp_s3.get_object(Bucket=bucket, Key="full.bin", ChecksumMode="ENABLED")
    assert got[field] == expected
    assert got["Body"].read() == whole
    # HeadObject and GetObject name the checksum type (x-amz-checksum-type), as S3 does.
    assert head.get("ChecksumType") == "FULL_OBJECT"
    assert got.get("ChecksumType") == "FULL_OBJECT"


def test_boto3_computes_part_checksums_itself(mp_s3, bucket, rng):
    """ChecksumAlgorithm on UploadPart: botocore computes the CRC32 (header or trailer) itself."""
    parts = [s3util.payload(rng, MIN_PART_BYTES), s3util.payload(rng, 10)]
    upload_id = start_upload(mp_s3, bucket, "auto.bin", ChecksumAlgorithm="CRC32")
    listed = upload_parts(mp_s3, bucket, "auto.bin", upload_id, parts, ChecksumAlgorithm="CRC32")
    assert [p["ChecksumCRC32"] for p in listed] == [s3util.CHECKSUM_VALUE["crc32"](p) for p in parts]
    done = complete(mp_s3, bucket, "auto.bin", upload_id, listed)
    assert done["ChecksumCRC32"] == composite_checksum("crc32", parts)
    assert read_all(mp_s3, bucket, "auto.bin", ChecksumMode="ENABLED") == b"".join(parts)


# ---------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------

@pytest.fixture
def two_part_upload(mp_s3, bucket, rng):
    """An upload of 'err.bin' with part 1 (5 MiB) and part 2 (1 KiB) uploaded."""
    parts = [s3util.payload(rng, MIN_PART_BYTES), s3util.payload(rng, KiB)]
    upload_id = start_upload(mp_s3, bucket, "err.bin")
    listed = upload_parts(mp_s3, bucket, "err.bin", upload_id, parts)
    return upload_id, listed, parts


def assert_upload_still_completes(s3, bucket, upload_id, listed, parts):
    """A rejected Complete leaves the upload intact: the right part list still completes it."""
    complete(s3, bucket, "err.bin", upload_id, listed)
    assert read_all(s3, bucket, "err.bin") == b"".join(parts)


def test_complete_with_wrong_etag_is_invalid_part(mp_s3, bucket, two_part_upload):
    upload_id, listed, parts = two_part_upload
    wrong = [listed[0], {"PartNumber": 2, "ETag": '"0123456789abcdef0123456789abcdef"'}]
    with pytest.raises(ClientError) as excinfo:
        complete(mp_s3, bucket, "err.bin", upload_id, wrong)
    assert client_error(excinfo) == ("InvalidPart", 400)
    assert_upload_still_completes(mp_s3, bucket, upload_id, listed, parts)


def test_complete_with_missing_part_is_invalid_part(mp_s3, bucket, two_part_upload):
    upload_id, listed, parts = two_part_upload
    with pytest.raises(ClientError) as excinfo:
        complete(mp_s3, bucket, "err.bin", upload_id,
                 listed + [{"PartNumber": 3, "ETag": listed[1]["ETag"]}])
    assert client_error(excinfo) == ("InvalidPart", 400)
    assert_upload_still_completes(mp_s3, bucket, upload_id, listed, parts)


def test_complete_out_of_order_is_invalid_part_order(mp_s3, bucket, two_part_upload):
    upload_id, listed, parts = two_part_upload
    with pytest.raises(ClientError) as excinfo:
        complete(mp_s3, bucket, "err.bin", upload_id, [listed[1], listed[0]])
    assert client_error(excinfo) == ("InvalidPartOrder", 400)
    with pytest.raises(ClientError) as excinfo:
        complete(mp_s3, bucket, "err.bin", upload_id, [listed[0], listed[0]])
    assert client_error(excinfo) == ("InvalidPartOrder", 400)
    assert_upload_still_completes(mp_s3, bucket, upload_id, listed, parts)


def test_small_non_final_part_is_entity_too_small(mp_s3, bucket, rng):
    parts = [s3util.payload(rng, MIN_PART_BYTES - 1), s3util.payload(rng, 10)]
    upload_id = start_upload(mp_s3, bucket, "small.bin")
    listed = upload_parts(mp_s3, bucket, "small.bin", upload_id, parts)
    with pytest.raises(ClientError) as excinfo:
        complete(mp_s3, bucket, "small.bin", upload_id, listed)
    assert client_error(excinfo) == ("EntityTooSmall", 400)
    # A small part alone is the final part, so that is allowed.
    complete(mp_s3, bucket, "small.bin", upload_id, listed[:1])
    assert read_all(mp_s3, bucket, "small.bin") == parts[0]


def test_unknown_upload_id_is_no_such_upload(mp_s3, bucket):
    bogus = "this-upload-id-does-not-exist"
    calls = [
        lambda: mp_s3.upload_part(Bucket=bucket, Key="k", UploadId=bogus, PartNumber=1, Body=b"x"),
        lambda: mp_s3.list_parts(Bucket=bucket, Key="k", UploadId=bogus),
        lambda: complete(mp_s3, bucket, "k", bogus, [{"PartNumber": 1, "ETag": '"abc"'}]),
        lambda: mp_s3.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=bogus),
    ]
    for call in calls:
        with pytest.raises(ClientError) as excinfo:
            call()
        assert client_error(excinfo) == ("NoSuchUpload", 404)


def test_upload_id_used_with_another_key_is_no_such_upload(mp_s3, bucket, two_part_upload):
    upload_id, listed, parts = two_part_upload
    calls = [
        lambda: mp_s3.upload_part(Bucket=bucket, Key="other.bin", UploadId=upload_id, PartNumber=3,
                                  Body=b"x"),
        lambda: mp_s3.list_parts(Bucket=bucket, Key="other.bin", UploadId=upload_id),
        lambda: complete(mp_s3, bucket, "other.bin", upload_id, listed),
        lambda: mp_s3.abort_multipart_upload(Bucket=bucket, Key="other.bin", UploadId=upload_id),
    ]
    for call in calls:
        with pytest.raises(ClientError) as excinfo:
            call()
        assert client_error(excinfo) == ("NoSuchUpload", 404)
    assert "Contents" not in mp_s3.list_objects_v2(Bucket=bucket, Prefix="other.bin")
    assert_upload_still_completes(mp_s3, bucket, upload_id, listed, parts)


def test_a_retried_complete_answers_as_the_completion_did(mp_s3, bucket, rng):
    """SDKs retry a CompleteMultipartUpload whose answer was lost: the same parts again get 200 and the
    same result, as S3 answers; other parts are InvalidPart; once the key holds another object the
    upload is NoSuchUpload."""
    parts = [s3util.payload(rng, MIN_PART_BYTES), s3util.payload(rng, 3 * KiB)]
    upload_id = start_upload(mp_s3, bucket, "retried.bin", ChecksumAlgorithm="SHA256")
    listed = upload_parts(mp_s3, bucket, "retried.bin", upload_id, parts, ChecksumAlgorithm="SHA256")
    first = complete(mp_s3, bucket, "retried.bin", upload_id, listed)
    for _ in range(2):
        again = complete(mp_s3, bucket, "retried.bin", upload_id, listed)
        for field in ("ETag", "Bucket", "Key", "Location", "ChecksumSHA256"):
            assert again[field] == first[field], field
    with pytest.raises(ClientError) as excinfo:
        complete(mp_s3, bucket, "retried.bin", upload_id, listed[:1])
    assert client_error(excinfo) == ("InvalidPart", 400)
    with pytest.raises(ClientError) as excinfo:
        complete(mp_s3, bucket, "retried.bin", upload_id[:-1] + ("0" if upload_id[-1] != "0" else "1"),
                 listed)
    assert client_error(excinfo)[0] in ("NoSuchUpload", "InvalidArgument")
    assert read_all(mp_s3, bucket, "retried.bin") == b"".join(parts)
    # The upload's id means nothing for another key, nor once the key was overwritten
    with pytest.raises(ClientError) as excinfo:
        complete(mp_s3, bucket, "other.bin", upload_id, listed)
    assert client_error(excinfo) == ("NoSuchUpload", 404)
    mp_s3.put_object(Bucket=bucket, Key="retried.bin", Body=b"newer")
    with pytest.raises(ClientError) as excinfo:
        complete(mp_s3, bucket, "retried.bin", upload_id, listed)
    assert client_error(excinfo) == ("NoSuchUpload", 404)
    assert read_all(mp_s3, bucket, "retried.bin") == b"newer"


def test_an_aborted_upload_is_no_such_upload(mp_s3, bucket):
    upload_id = start_upload(mp_s3, bucket, "gone.bin")
    listed = upload_parts(mp_s3, bucket, "gone.bin", upload_id, [b"only part"])
    complete(mp_s3, bucket, "gone.bin", upload_id, listed)

    aborted = start_upload(mp_s3, bucket, "gone.bin")
    mp_s3.abort_multipart_upload(Bucket=bucket, Key="gone.bin", UploadId=aborted)
    with pytest.raises(ClientError) as excinfo:
        mp_s3.upload_part(Bucket=bucket, Key="gone.bin", UploadId=aborted, PartNumber=1, Body=b"x")
    assert client_error(excinfo) == ("NoSuchUpload", 404)
    with pytest.raises(ClientError) as excinfo:
        complete(mp_s3, bucket, "gone.bin", aborted, listed)
    assert client_error(excinfo) == ("NoSuchUpload", 404)
    assert read_all(mp_s3, bucket, "gone.bin") == b"only part"


def complete_xml(parts: list[dict]) -> bytes:
    inner = "".join(f"<Part><PartNumber>{p['PartNumber']}</PartNumber>"
                    f"<ETag>{xml.sax.saxutils.escape(p['ETag'])}</ETag></Part>" for p in parts)
    return (f'<CompleteMultipartUpload xmlns="{s3util.S3_XML_NAMESPACE}">{inner}'
            f"</CompleteMultipartUpload>").encode()


@pytest.mark.parametrize("body", [
    pytest.param(b"this is not xml <<<", id="garbage"),
    pytest.param(b"", id="empty-body"),
    pytest.param(b'<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                 b"</CompleteMultipartUpload>", id="empty-part-list"),
    pytest.param(b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "1">]><CompleteMultipartUpload>'
                 b"<Part><PartNumber>&e;</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>",
                 id="doctype"),
    pytest.param(b"<CompleteMultipartUpload><Part><PartNumber>one</PartNumber><ETag>x</ETag></Part>"
                 b"</CompleteMultipartUpload>", id="non-numeric-part-number"),
    pytest.param(b"<SomethingElse/>", id="wrong-root"),
])
def test_malformed_complete_body_is_malformed_xml(fjord_server, mp_s3, bucket, two_part_upload, body):
    upload_id, listed, parts = two_part_upload
    response = signed_request(fjord_server, "POST", bucket, "err.bin", [("uploadId", upload_id)],
                              body=body)
    assert response.status_code == 400, response.text
    assert error_code(response) == "MalformedXML", response.text
    assert_upload_still_completes(mp_s3, bucket, upload_id, listed, parts)


def test_hand_written_complete_body_is_accepted(fjord_server, mp_s3, bucket, two_part_upload):
    """The same path as the malformed cases, with a valid document: proves the signer is right."""
    upload_id, listed, parts = two_part_upload
    response = signed_request(fjord_server, "POST", bucket, "err.bin", [("uploadId", upload_id)],
                              body=complete_xml(listed))
    assert response.status_code == 200, response.text
    assert s3util.xml_root_tag(response.content) == "CompleteMultipartUploadResult"
    assert read_all(mp_s3, bucket, "err.bin") == b"".join(parts)


@pytest.mark.parametrize("number", [0, 10001, -1])
def test_part_number_out_of_range_is_invalid_argument(fjord_server, mp_s3, bucket, number):
    upload_id = start_upload(mp_s3, bucket, "range.bin")
    if number >= 0:
        with pytest.raises(ClientError) as excinfo:
            mp_s3.upload_part(Bucket=bucket, Key="range.bin", UploadId=upload_id, PartNumber=number,
                              Body=b"data")
        assert client_error(excinfo) == ("InvalidArgument", 400)
    else:
        response = signed_request(fjord_server, "PUT", bucket, "range.bin",
                                  [("partNumber", str(number)), ("uploadId", upload_id)], body=b"data")
        assert response.status_code == 400 and error_code(response) == "InvalidArgument", response.text
    assert mp_s3.list_parts(Bucket=bucket, Key="range.bin", UploadId=upload_id).get("Parts", []) == []
    mp_s3.abort_multipart_upload(Bucket=bucket, Key="range.bin", UploadId=upload_id)


@pytest.mark.parametrize("algorithm", ["crc32", "crc32c", "sha1", "sha256", "crc64nvme"])
def test_wrong_part_checksum_is_bad_digest_and_not_stored(mp_s3, bucket, rng, algorithm):
    data = s3util.payload(rng, 100 * KiB)
    upload_id = start_upload(mp_s3, bucket, "digest.bin", ChecksumAlgorithm=algorithm.upper())
    field = "Checksum" + algorithm.upper()
    with pytest.raises(ClientError) as excinfo:
        mp_s3.upload_part(Bucket=bucket, Key="digest.bin", UploadId=upload_id, PartNumber=1, Body=data,
                          **{field: s3util.wrong_checksum_value(algorithm, data)})
    assert client_error(excinfo) == ("BadDigest", 400)
    assert mp_s3.list_parts(Bucket=bucket, Key="digest.bin", UploadId=upload_id).get("Parts", []) == []
    right = mp_s3.upload_part(Bucket=bucket, Key="digest.bin", UploadId=upload_id, PartNumber=1,
                              Body=data, **{field: s3util.CHECKSUM_VALUE[algorithm](data)})
    assert right[field] == s3util.CHECKSUM_VALUE[algorithm](data)
    mp_s3.abort_multipart_upload(Bucket=bucket, Key="digest.bin", UploadId=upload_id)


def test_wrong_content_md5_on_part_is_bad_digest(fjord_server, mp_s3, bucket):
    upload_id = start_upload(mp_s3, bucket, "md5.bin")
    response = signed_request(fjord_server, "PUT", bucket, "md5.bin",
                              [("partNumber", "1"), ("uploadId", upload_id)],
                              headers={"Content-MD5": s3util.md5_b64(b"other")}, body=b"part body")
    assert response.status_code == 400, response.text
    assert error_code(response) == "BadDigest", response.text
    mp_s3.abort_multipart_upload(Bucket=bucket, Key="md5.bin", UploadId=upload_id)


def test_complete_with_if_none_match_on_existing_key_is_precondition_failed(mp_s3, bucket, two_part_upload):
    upload_id, listed, parts = two_part_upload
    mp_s3.put_object(Bucket=bucket, Key="err.bin", Body=b"already here")
    with pytest.raises(ClientError) as excinfo:
        complete(mp_s3, bucket, "err.bin", upload_id, listed, IfNoneMatch="*")
    assert client_error(excinfo) == ("PreconditionFailed", 412)
    assert read_all(mp_s3, bucket, "err.bin") == b"already here"
    mp_s3.delete_object(Bucket=bucket, Key="err.bin")
    complete(mp_s3, bucket, "err.bin", upload_id, listed, IfNoneMatch="*")
    assert read_all(mp_s3, bucket, "err.bin") == b"".join(parts)


def test_complete_with_if_match(mp_s3, bucket, two_part_upload):
    upload_id, listed, parts = two_part_upload
    etag = mp_s3.put_object(Bucket=bucket, Key="err.bin", Body=b"version one")["ETag"]
    with pytest.raises(ClientError) as excinfo:
        complete(mp_s3, bucket, "err.bin", upload_id, listed, IfMatch='"0123456789abcdef0123456789abcdef"')
    assert client_error(excinfo) == ("PreconditionFailed", 412)
    assert read_all(mp_s3, bucket, "err.bin") == b"version one"
    complete(mp_s3, bucket, "err.bin", upload_id, listed, IfMatch=etag)
    assert read_all(mp_s3, bucket, "err.bin") == b"".join(parts)


def test_delete_with_wrong_if_match_is_precondition_failed(mp_s3, bucket):
    done, _ = multipart_put(mp_s3, bucket, "cond-del.bin", [b"multipart body"])
    with pytest.raises(ClientError) as excinfo:
        mp_s3.delete_object(Bucket=bucket, Key="cond-del.bin", IfMatch='"0123456789abcdef0123456789abcdef-1"')
    assert client_error(excinfo) == ("PreconditionFailed", 412)
    assert read_all(mp_s3, bucket, "cond-del.bin") == b"multipart body"
    mp_s3.delete_object(Bucket=bucket, Key="cond-del.bin", IfMatch=done["ETag"])
    assert "Contents" not in mp_s3.list_objects_v2(Bucket=bucket)


@pytest.mark.parametrize("algorithm", ["SHA256", "SHA1"])
def test_full_object_with_sha_is_invalid_request(mp_s3, bucket, algorithm):
    with pytest.raises(ClientError) as excinfo:
        mp_s3.create_multipart_upload(Bucket=bucket, Key="sha.bin", ChecksumAlgorithm=algorithm,
                                      ChecksumType="FULL_OBJECT")
    assert client_error(excinfo) == ("InvalidRequest", 400)
    assert mp_s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_upload_to_missing_bucket_is_no_such_bucket(mp_s3, bucket_name):
    with pytest.raises(ClientError) as excinfo:
        mp_s3.create_multipart_upload(Bucket=bucket_name, Key="k")
    assert client_error(excinfo) == ("NoSuchBucket", 404)


# ---------------------------------------------------------------------------------------------------
# Space: a private server, so the count of data files is exact
# ---------------------------------------------------------------------------------------------------

@pytest.fixture
def private(make_server):
    server = make_server(name="fjord-space")
    client = server.client()
    client.create_bucket(Bucket="space")
    return server, client


def test_abort_reclaims_parts(private, rng):
    server, s3 = private
    baseline = data_file_count(server)
    upload_id = start_upload(s3, "space", "aborted.bin")
    upload_parts(s3, "space", "aborted.bin", upload_id, [s3util.payload(rng, MiB) for _ in range(3)])
    upload_parts(s3, "space", "aborted.bin", upload_id, [s3util.payload(rng, MiB)])  # part 1 replaced
    assert data_file_count(server) > baseline
    s3.abort_multipart_upload(Bucket="space", Key="aborted.bin", UploadId=upload_id)
    wait_for_file_count(server, baseline, "after AbortMultipartUpload")


def test_overwrite_and_delete_reclaim_multipart_object(private, rng):
    server, s3 = private
    baseline = data_file_count(server)
    layout = [MIN_PART_BYTES, MIN_PART_BYTES, 3 * KiB]
    multipart_put(s3, "space", "obj.bin", [s3util.payload(rng, n) for n in layout])
    with_one = data_file_count(server)
    assert with_one > baseline
    second = [s3util.payload(rng, n) for n in layout]
    multipart_put(s3, "space", "obj.bin", second)
    wait_for_file_count(server, with_one, "after overwriting a multipart object with one like it")
    assert s3.get_object(Bucket="space", Key="obj.bin")["Body"].read() == b"".join(second)
    s3.put_object(Bucket="space", Key="obj.bin", Body=b"small")
    multipart_put(s3, "space", "obj.bin", second)
    wait_for_file_count(server, with_one, "after multipart -> PUT -> multipart on one key")
    s3.delete_object(Bucket="space", Key="obj.bin")
    wait_for_file_count(server, baseline, "after deleting the multipart object")


def test_complete_that_omits_parts_reclaims_them(private, rng):
    server, s3 = private
    baseline = data_file_count(server)
    parts = [s3util.payload(rng, MIN_PART_BYTES), s3util.payload(rng, MIN_PART_BYTES),
             s3util.payload(rng, KiB), s3util.payload(rng, 2 * KiB)]
    upload_id = start_upload(s3, "space", "partial.bin")
    listed = upload_parts(s3, "space", "partial.bin", upload_id, parts)
    complete(s3, "space", "partial.bin", upload_id, [listed[0], listed[2]])
    assert s3.get_object(Bucket="space", Key="partial.bin")["Body"].read() == parts[0] + parts[2]
    s3.delete_object(Bucket="space", Key="partial.bin")
    wait_for_file_count(server, baseline, "after Complete without parts 2 and 4, then delete")


def test_failed_part_uploads_leave_no_data(private, rng):
    server, s3 = private
    baseline = data_file_count(server)
    data = s3util.payload(rng, MiB)
    upload_id = start_upload(s3, "space", "bad.bin", ChecksumAlgorithm="CRC32")
    with pytest.raises(ClientError):
        s3.upload_part(Bucket="space", Key="bad.bin", UploadId=upload_id, PartNumber=1, Body=data,
                       ChecksumCRC32=s3util.wrong_checksum_value("crc32", data))
    s3.abort_multipart_upload(Bucket="space", Key="bad.bin", UploadId=upload_id)
    wait_for_file_count(server, baseline, "after a rejected part and an abort")


# ---------------------------------------------------------------------------------------------------
# Expiry of stale uploads
# ---------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_stale_uploads_expire_and_free_their_parts(make_server, rng):
    server = make_server(extra_args=["--multipart-expiry-seconds", "2",
                                     "--multipart-expiry-interval-seconds", "1"], name="fjord-expiry")
    s3 = server.client()
    s3.create_bucket(Bucket="expiry")
    baseline = data_file_count(server)
    upload_id = start_upload(s3, "expiry", "stale.bin")
    upload_parts(s3, "expiry", "stale.bin", upload_id, [s3util.payload(rng, 256 * KiB)] * 2)
    assert data_file_count(server) > baseline
    s3util.wait_until(lambda: not s3.list_multipart_uploads(Bucket="expiry").get("Uploads"), 30,
                      interval_s=0.2, what="the stale upload to expire")
    with pytest.raises(ClientError) as excinfo:
        s3.upload_part(Bucket="expiry", Key="stale.bin", UploadId=upload_id, PartNumber=3, Body=b"x")
    assert client_error(excinfo) == ("NoSuchUpload", 404)
    wait_for_file_count(server, baseline, "after the stale upload expired")
    # Completed objects are not touched by expiry.
    multipart_put(s3, "expiry", "kept.bin", [b"kept"])
    fresh_id = start_upload(s3, "expiry", "fresh.bin")
    s3util.wait_until(lambda: not s3.list_multipart_uploads(Bucket="expiry").get("Uploads"), 30,
                      interval_s=0.2, what="the second upload to expire")
    with pytest.raises(ClientError) as excinfo:
        s3.list_parts(Bucket="expiry", Key="fresh.bin", UploadId=fresh_id)
    assert client_error(excinfo) == ("NoSuchUpload", 404)
    assert s3.get_object(Bucket="expiry", Key="kept.bin")["Body"].read() == b"kept"
