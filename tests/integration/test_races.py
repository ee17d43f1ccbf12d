"""Races between concurrent requests on one key or one upload: conditional PUTs, parts uploaded twice
at once, aborts and completes against part uploads in flight. Threads start together on a barrier;
each scenario runs a few rounds, and every outcome is checked, not only the first."""

import concurrent.futures
import os
import threading

import pytest
from botocore.exceptions import ClientError

import s3util
from multipart_support import (MIN_PART_BYTES, complete, data_file_count, start_upload, upload_parts,
                               wait_for_file_count)
from s3util import KiB, MiB

THREADS = 16
ROUNDS = 3


def outcome(call) -> tuple[str, object]:
    """('ok', response) or (error code, HTTP status) of a boto3 call."""
    try:
        return "ok", call()
    except ClientError as error:
        return error.response["Error"]["Code"], error.response["ResponseMetadata"]["HTTPStatusCode"]


def run_together(functions) -> list:
    """Runs every function on its own thread, released at once by a barrier; returns their results."""
    barrier = threading.Barrier(len(functions))

    def released(function):
        barrier.wait(timeout=30)
        return function()

    with concurrent.futures.ThreadPoolExecutor(len(functions)) as pool:
        futures = [pool.submit(released, f) for f in functions]
        return [f.result(timeout=120) for f in futures]


@pytest.fixture(scope="module")
def race_s3(fjord_server):
    return fjord_server.client(max_pool_connections=THREADS + 4)


# ---------------------------------------------------------------------------------------------------
# Conditional writes
# ---------------------------------------------------------------------------------------------------

def test_concurrent_if_none_match_puts_have_one_winner(race_s3, bucket, rng):
    for round_number in range(ROUNDS):
        key = f"contended-{round_number}"
        bodies = [s3util.payload(rng, 64 * KiB + n) for n in range(THREADS)]
        results = run_together([
            (lambda body=body: outcome(lambda: race_s3.put_object(Bucket=bucket, Key=key, Body=body,
                                                                  IfNoneMatch="*")))
            for body in bodies])
        winners = [n for n, (code, _) in enumerate(results) if code == "ok"]
        losers = [result for result in results if result[0] != "ok"]
        assert len(winners) == 1, results
        assert losers == [("PreconditionFailed", 412)] * (THREADS - 1), results
        got = race_s3.get_object(Bucket=bucket, Key=key)
        assert got["Body"].read() == bodies[winners[0]]
        assert got["ETag"] == results[winners[0]][1]["ETag"]


def test_concurrent_if_none_match_completes_have_one_winner(race_s3, bucket):
    contenders = 6
    for round_number in range(ROUNDS):
        key = f"completed-{round_number}"
        uploads = []
        for n in range(contenders):
            upload_id = start_upload(race_s3, bucket, key)
            body = f"upload {n} of round {round_number}".encode()
            uploads.append((upload_id, upload_parts(race_s3, bucket, key, upload_id, [body]), body))
        results = run_together([
            (lambda u=u: outcome(lambda: complete(race_s3, bucket, key, u[0], u[1], IfNoneMatch="*")))
            for u in uploads])
        winners = [n for n, (code, _) in enumerate(results) if code == "ok"]
        assert len(winners) == 1, results
        assert sorted(r for r in results if r[0] != "ok") == [("PreconditionFailed", 412)] * (contenders - 1)
        assert race_s3.get_object(Bucket=bucket, Key=key)["Body"].read() == uploads[winners[0]][2]
        for n, (upload_id, _, _) in enumerate(uploads):
            if n != winners[0]:  # A failed precondition leaves the upload to be retried or aborted.
                race_s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
    assert race_s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


# ---------------------------------------------------------------------------------------------------
# One part number uploaded by several threads at once
# ---------------------------------------------------------------------------------------------------

def test_concurrent_uploads_of_one_part_number_never_mix(race_s3, bucket, rng):
    writers = 6
    for round_number in range(ROUNDS):
        key = f"same-part-{round_number}"
        upload_id = start_upload(race_s3, bucket, key)
        bodies = [s3util.payload(rng, MiB + 4099 * n) for n in range(writers)]
        results = run_together([
            (lambda body=body: race_s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id,
                                                   PartNumber=1, Body=body))
            for body in bodies])
        etags = [r["ETag"] for r in results]
        assert len(set(etags)) == writers, etags
        listed = race_s3.list_parts(Bucket=bucket, Key=key, UploadId=upload_id)["Parts"]
        assert len(listed) == 1 and listed[0]["ETag"] in etags, (listed, etags)
        survivor = etags.index(listed[0]["ETag"])
        assert listed[0]["Size"] == len(bodies[survivor])
        for n, etag in enumerate(etags):
            if n != survivor:  # A replaced part's ETag no longer completes the upload.
                with pytest.raises(ClientError) as excinfo:
                    complete(race_s3, bucket, key, upload_id, [{"PartNumber": 1, "ETag": etag}])
                assert excinfo.value.response["Error"]["Code"] == "InvalidPart"
                break
        complete(race_s3, bucket, key, upload_id, [{"PartNumber": 1, "ETag": etags[survivor]}])
        assert race_s3.get_object(Bucket=bucket, Key=key)["Body"].read() == bodies[survivor]


def test_concurrent_uploads_of_a_middle_part_never_mix(race_s3, bucket, rng):
    """The contended part sits between others, so a mix-up of segments would show in the offsets."""
    key = "middle-part"
    upload_id = start_upload(race_s3, bucket, key)
    first = s3util.payload(rng, MIN_PART_BYTES)
    last = s3util.payload(rng, 10 * KiB)
    outer = upload_parts(race_s3, bucket, key, upload_id, [first]) + \
        upload_parts(race_s3, bucket, key, upload_id, [last], first_number=3)
    bodies = [s3util.payload(rng, MIN_PART_BYTES + 97 * n) for n in range(4)]
    results = run_together([
        (lambda body=body: race_s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=2,
                                               Body=body))
        for body in bodies])
    listed = race_s3.list_parts(Bucket=bucket, Key=key, UploadId=upload_id)["Parts"]
    middle = next(p for p in listed if p["PartNumber"] == 2)
    survivor = [r["ETag"] for r in results].index(middle["ETag"])
    complete(race_s3, bucket, key, upload_id, [outer[0], {"PartNumber": 2, "ETag": middle["ETag"]}, outer[1]])
    assert race_s3.get_object(Bucket=bucket, Key=key)["Body"].read() == first + bodies[survivor] + last


# ---------------------------------------------------------------------------------------------------
# Abort and Complete against parts in flight (private server: the data files are counted)
# ---------------------------------------------------------------------------------------------------

@pytest.fixture
def private(make_server):
    server = make_server(name="fjord-races")
    client = server.client(max_pool_connections=THREADS + 4)
    client.create_bucket(Bucket="races")
    return server, client


def start_raw_part_upload(server, key: str, upload_id: str, body: bytes, sent_bytes: int):
    """Sends the head and the first `sent_bytes` of an UploadPart on a raw socket; returns the
    connection, to be finished with finish_raw_part_upload."""
    path = s3util.object_path("races", key)
    query = [("partNumber", "1"), ("uploadId", upload_id)]
    headers = {"content-length": str(len(body))}
    signed = s3util.sign_headers(server.credentials, "PUT", server.host, path, query, headers,
                                 payload_hash=s3util.UNSIGNED_PAYLOAD)
    connection = s3util.RawConnection("127.0.0.1", server.port, timeout_s=30)
    request = s3util.raw_request("PUT", path + "?" + s3util.canonical_query(query), server.host,
                                 signed.headers)
    connection.send(request + body[:sent_bytes])
    return connection


def finish_raw_part_upload(connection, body: bytes, sent_bytes: int) -> s3util.RawResponse:
    try:
        connection.send(body[sent_bytes:])
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may answer (and close) before it has read the whole body
    try:
        return connection.read_response()
    finally:
        connection.close()


def assert_upload_gone(s3, key, upload_id):
    listed = s3.list_multipart_uploads(Bucket="races").get("Uploads", [])
    assert upload_id not in [u["UploadId"] for u in listed]
    with pytest.raises(ClientError) as excinfo:
        complete(s3, "races", key, upload_id, [{"PartNumber": 1, "ETag": '"whatever"'}])
    assert excinfo.value.response["Error"]["Code"] == "NoSuchUpload"
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_abort_while_part_upload_is_in_progress(private, rng):
    server, s3 = private
    baseline = data_file_count(server)
    for round_number in range(ROUNDS):
        key = f"aborted-{round_number}"
        upload_id = start_upload(s3, "races", key)
        body = s3util.payload(rng, 4 * MiB)
        half = len(body) // 2
        connection = start_raw_part_upload(server, key, upload_id, body, half)
        try:
            abort = s3.abort_multipart_upload(Bucket="races", Key=key, UploadId=upload_id)
            assert abort["ResponseMetadata"]["HTTPStatusCode"] == 204
        finally:
            response = finish_raw_part_upload(connection, body, half)
        if response.status != 200:
            assert response.status == 404, response
            assert s3util.xml_children(response.body)["Code"] == "NoSuchUpload", response.body
        assert_upload_gone(s3, key, upload_id)
        assert "Contents" not in s3.list_objects_v2(Bucket="races", Prefix=key)
    wait_for_file_count(server, baseline, "after aborts that raced part uploads")


def test_abort_while_many_parts_are_in_flight(private, rng):
    server, s3 = private
    baseline = data_file_count(server)
    key = "aborted-many"
    upload_id = start_upload(s3, "races", key)
    bodies = [s3util.payload(rng, MiB) for _ in range(8)]

    def uploader(number):
        return outcome(lambda: s3.upload_part(Bucket="races", Key=key, UploadId=upload_id,
                                              PartNumber=number, Body=bodies[number - 1]))

    def aborter():
        return outcome(lambda: s3.abort_multipart_upload(Bucket="races", Key=key, UploadId=upload_id))

    results = run_together([lambda n=n: uploader(n) for n in range(1, 9)] + [aborter])
    assert results[-1][0] == "ok", results[-1]
    for code, detail in results[:-1]:
        assert code == "ok" or (code, detail) == ("NoSuchUpload", 404), (code, detail)
    assert_upload_gone(s3, key, upload_id)
    wait_for_file_count(server, baseline, "after an abort that raced 8 part uploads")


def test_complete_and_abort_race_has_one_outcome(private, rng):
    server, s3 = private
    baseline = data_file_count(server)
    for round_number in range(30):  # each round is cheap; the window is narrow
        key = f"complete-or-abort-{round_number}"
        upload_id = start_upload(s3, "races", key)
        parts = [s3util.payload(rng, 64 * KiB)]
        listed = upload_parts(s3, "races", key, upload_id, parts)
        completed, aborted = run_together([
            lambda: outcome(lambda: complete(s3, "races", key, upload_id, listed)),
            lambda: outcome(lambda: s3.abort_multipart_upload(Bucket="races", Key=key,
                                                              UploadId=upload_id))])
        if completed[0] == "ok":
            # Abort after Complete: S3 answers 204 or NoSuchUpload; the object must stay whole.
            assert aborted[0] == "ok" or aborted == ("NoSuchUpload", 404), aborted
            assert s3.get_object(Bucket="races", Key=key)["Body"].read() == b"".join(parts)
            s3.delete_object(Bucket="races", Key=key)
        else:
            assert completed == ("NoSuchUpload", 404), completed
            assert aborted[0] == "ok", aborted
            assert "Contents" not in s3.list_objects_v2(Bucket="races", Prefix=key)
        assert s3.list_multipart_uploads(Bucket="races").get("Uploads", []) == []
    wait_for_file_count(server, baseline, "after Complete/Abort races and deletes")


def test_part_upload_racing_complete_is_not_lost_or_leaked(private, rng):
    """A part uploaded while Complete runs either lands before (and is not in the part list, so it
    is reclaimed) or fails with NoSuchUpload: no data file survives the final delete either way."""
    server, s3 = private
    baseline = data_file_count(server)
    key = "complete-vs-part"
    upload_id = start_upload(s3, "races", key)
    listed = upload_parts(s3, "races", key, upload_id, [s3util.payload(rng, 2 * MiB)])
    extra = s3util.payload(rng, 2 * MiB)
    completed, uploaded = run_together([
        lambda: outcome(lambda: complete(s3, "races", key, upload_id, listed)),
        lambda: outcome(lambda: s3.upload_part(Bucket="races", Key=key, UploadId=upload_id,
                                               PartNumber=2, Body=extra))])
    assert completed[0] == "ok", completed
    assert uploaded[0] == "ok" or uploaded == ("NoSuchUpload", 404), uploaded
    assert s3.head_object(Bucket="races", Key=key)["ContentLength"] == 2 * MiB
    s3.delete_object(Bucket="races", Key=key)
    wait_for_file_count(server, baseline, "after a part upload raced Complete")


def test_get_of_multipart_object_survives_delete_and_overwrite_midstream(fjord_server, bucket):
    """A GET that started streaming a multipart object completes with the old bytes even if the object is
    deleted or overwritten meanwhile (its data files are opened before the first byte is sent). "refill" then
    writes objects of the same part sizes, which would reuse the freed files (spares) if the reader's open
    files were not protected from reuse."""
    from conftest import make_client
    s3 = make_client(fjord_server)
    for action in ("delete", "overwrite", "refill"):
        key = f"streamed-{action}"
        parts = [os.urandom(20 * 1024 * 1024), os.urandom(5 * 1024 * 1024)]
        upload = s3.create_multipart_upload(Bucket=bucket, Key=key)
        etags = [s3.upload_part(Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=n, Body=p)["ETag"]
                 for n, p in enumerate(parts, start=1)]
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload["UploadId"], MultipartUpload={
            "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]})
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
        first = body.read(1024 * 1024)
        other = make_client(fjord_server)
        if action == "delete":
            other.delete_object(Bucket=bucket, Key=key)
        else:
            other.put_object(Bucket=bucket, Key=key, Body=b"new")
        if action == "refill":
            for n, part in enumerate(parts):
                other.put_object(Bucket=bucket, Key=f"{key}-refill-{n}", Body=os.urandom(len(part)))
        rest = body.read()
        assert first + rest == parts[0] + parts[1], action
