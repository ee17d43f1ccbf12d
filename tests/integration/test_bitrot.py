"""Bit rot on disk: a GET of a damaged object answers an error (never wrong bytes), names the object in
the log and counts in fjord_data_corrupted_total (as do copies from it); `fjord scrub` finds every damaged
object; scrub refuses to run next to a live server."""

import os
import subprocess

import pytest
from botocore.exceptions import ClientError

import s3util
from conftest import FjordServer, binary_path, fetch_metrics, make_client, metric_value, server_metric

CORRUPTED = "fjord_data_corrupted_total"


def data_files(server):
    found = []
    for d in server.data_dirs:
        for root, _dirs, files in os.walk(d / "objects"):
            found += [os.path.join(root, f) for f in files]
    return found


def scrub(server):
    command = [str(binary_path()), "scrub"]
    for d in server.data_dirs:
        command += ["--data", str(d)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_bit_rot_is_refused_on_read_logged_and_found_by_scrub(tmp_dir):
    server = FjordServer(tmp_dir / "rot")
    server.start()
    s3 = make_client(server)
    s3.create_bucket(Bucket="rot")
    bodies = {f"obj/{i}": os.urandom(300_000 + i) for i in range(6)}
    for key, body in bodies.items():
        s3.put_object(Bucket="rot", Key=key, Body=body)
    # /metrics needs a signature by default.
    anonymous = fetch_metrics(server, signed=False)
    assert anonymous.status_code == 403
    assert s3util.xml_children(anonymous.content)["Code"] == "AccessDenied"
    assert server_metric(server, CORRUPTED) == 0

    # Scrub refuses while the server holds the data directory.
    busy = scrub(server)
    assert busy.returncode != 0 and "in use by another Fjord process" in busy.stderr
    server.stop()

    clean = scrub(server)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "6 objects" in clean.stdout and "0 corrupt" in clean.stdout

    # Flip one byte in the middle of one object's data (not its footer).
    victim = sorted(data_files(server))[0]
    with open(victim, "r+b") as f:
        f.seek(150_000)
        byte = f.read(1)
        f.seek(150_000)
        f.write(bytes([byte[0] ^ 0x20]))

    damaged = scrub(server)
    assert damaged.returncode == 1
    corrupt_lines = [l for l in damaged.stdout.splitlines() if l.startswith("CORRUPT s3://rot/obj/")]
    assert len(corrupt_lines) == 1, damaged.stdout
    damaged_key = corrupt_lines[0].split()[1][len("s3://rot/"):].rstrip(":")

    server.start()
    s3 = make_client(server)
    damaged_gets = 3
    for _ in range(damaged_gets):
        with pytest.raises(ClientError) as error:
            s3.get_object(Bucket="rot", Key=damaged_key)["Body"].read()
        assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
        assert error.value.response["Error"]["Code"] == "InternalError"
        # Which file and block failed is for the operator's log; the client learns nothing of the disk.
        assert error.value.response["Error"]["Message"] == \
            "The stored data is damaged or missing; it is not served."
    for key, body in bodies.items():
        if key != damaged_key:
            assert s3.get_object(Bucket="rot", Key=key)["Body"].read() == body
    # A CopyObject shares the source's data file (no bytes are read), so the copy holds the same damage:
    # reading it is refused, logged with its name, counted. UploadPartCopy reads the source: refused.
    s3.copy_object(Bucket="rot", Key="copy-dest", CopySource={"Bucket": "rot", "Key": damaged_key})
    with pytest.raises(ClientError) as copy_error:
        s3.get_object(Bucket="rot", Key="copy-dest")["Body"].read()
    assert copy_error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    s3.delete_object(Bucket="rot", Key="copy-dest")
    upload_id = s3.create_multipart_upload(Bucket="rot", Key="assembled")["UploadId"]
    with pytest.raises(ClientError) as part_error:
        s3.upload_part_copy(Bucket="rot", Key="assembled", UploadId=upload_id, PartNumber=2,
                            CopySource={"Bucket": "rot", "Key": damaged_key})
    assert part_error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    s3.abort_multipart_upload(Bucket="rot", Key="assembled", UploadId=upload_id)
    assert s3.list_objects_v2(Bucket="rot", Prefix="copy-dest")["KeyCount"] == 0

    # Exactly one count and one log line per read that met the damage.
    assert server_metric(server, CORRUPTED) == damaged_gets + 2
    log = server.log_path.read_text()
    assert "CRC32C mismatch" in log  # the data file and block, from the storage engine
    reported = [line for line in log.splitlines() if "data corrupted: " in line]
    assert len(reported) == damaged_gets + 2, "\n".join(reported)
    assert all(f"s3://rot/{damaged_key}" in line or "s3://rot/copy-dest" in line for line in reported), \
        "\n".join(reported)
    assert sum(f"(GET /rot/{damaged_key}," in line for line in reported) == damaged_gets
    assert sum("(GET /rot/copy-dest," in line for line in reported) == 1
    assert sum(f"the copy source of part 2 of upload {upload_id} for s3://rot/assembled" in line
               for line in reported) == 1
    server.stop()

    # With --metrics-public a scraper reads the counters without signing (they start again at 0).
    server.extra_args = ["--metrics-public"]
    server.start()
    s3 = make_client(server)
    with pytest.raises(ClientError):
        s3.get_object(Bucket="rot", Key=damaged_key)["Body"].read()
    public = fetch_metrics(server, signed=False)
    assert public.status_code == 200, public.text
    assert metric_value(public.text, CORRUPTED) == 1
    server.stop()


def test_damage_found_after_the_head_was_sent_cuts_the_body_and_is_counted(tmp_dir):
    server = FjordServer(tmp_dir / "late-rot")
    server.start()
    s3 = make_client(server)
    s3.create_bucket(Bucket="late")
    size = 3 * 1024 * 1024
    s3.put_object(Bucket="late", Key="deep/damage", Body=os.urandom(size))
    server.stop()
    # Damage in the third MiB: the first MiB is verified and sent before the read reaches it.
    [victim] = data_files(server)
    with open(victim, "r+b") as f:
        f.seek(size - 512 * 1024)
        byte = f.read(1)
        f.seek(size - 512 * 1024)
        f.write(bytes([byte[0] ^ 0x01]))
    server.start()
    signed = s3util.sign_headers(server.credentials, "GET", server.host, "/late/deep/damage")
    with s3util.RawConnection("127.0.0.1", server.port) as conn:
        conn.send(s3util.raw_request("GET", "/late/deep/damage", server.host, signed.headers))
        head = conn.read_head()
        assert head.status == 200 and int(head.headers["content-length"]) == size
        received = 0
        with pytest.raises(ConnectionError):
            while True:
                received += len(conn.read_exact(64 * 1024))
        assert 0 < received < size  # cut short, never wrong bytes in full
    assert server_metric(server, CORRUPTED) == 1
    reported = [line for line in server.log_path.read_text().splitlines() if "data corrupted: " in line]
    assert len(reported) == 1 and "s3://late/deep/damage:" in reported[0], reported
    server.stop()
