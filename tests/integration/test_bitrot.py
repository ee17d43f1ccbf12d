"""Bit rot on disk: a GET of a damaged object answers an error (never wrong bytes) and names the object in
the log; `fjord scrub` finds every damaged object; scrub refuses to run next to a live server."""

import os
import subprocess

import pytest
from botocore.exceptions import ClientError

from conftest import FjordServer, binary_path, make_client


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
    with pytest.raises(ClientError) as error:
        s3.get_object(Bucket="rot", Key=damaged_key)["Body"].read()
    assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert error.value.response["Error"]["Code"] == "InternalError"
    for key, body in bodies.items():
        if key != damaged_key:
            assert s3.get_object(Bucket="rot", Key=key)["Body"].read() == body
    log = server.log_path.read_text()
    assert f"/rot/{damaged_key}" in log and "CRC32C mismatch" in log
    server.stop()
