"""Several data directories (--data repeated): objects spread over them, survive a restart, a data
directory given in the wrong position is refused at start, and so is a set in which some directories are
no longer Fjord drives (not mounted, or replaced) unless the operator accepts a replacement."""

import os
import subprocess

import pytest
from botocore.exceptions import ClientError

from conftest import FjordServer, binary_path, make_client


def test_objects_spread_over_drives_and_survive_restart(tmp_dir):
    server = FjordServer(tmp_dir / "drives", data_dirs=3)
    server.start()
    try:
        s3 = make_client(server)
        s3.create_bucket(Bucket="drives")
        bodies = {f"k{i}": os.urandom(64 * 1024 + i) for i in range(60)}
        for key, body in bodies.items():
            s3.put_object(Bucket="drives", Key=key, Body=body)
        per_drive = [sum(len(files) for _, _, files in os.walk(d / "objects")) for d in server.data_dirs]
        assert sum(per_drive) == len(bodies)
        assert all(n > 0 for n in per_drive), per_drive
        server.kill()
        server.start()
        s3 = make_client(server)
        for key, body in bodies.items():
            assert s3.get_object(Bucket="drives", Key=key)["Body"].read() == body
    finally:
        server.stop()


def test_reordered_data_directories_are_refused(tmp_dir):
    server = FjordServer(tmp_dir / "order", data_dirs=2)
    server.start()
    server.stop()
    first, second = server.data_dirs
    result = subprocess.run([str(binary_path()), "serve", "--data", str(second), "--data", str(first),
                             "--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "original order" in result.stderr


def serve_once(server, *extra):
    """Runs `fjord serve` on the server's directories, expecting it to refuse to start."""
    cmd = [str(binary_path()), "serve", "--listen", "127.0.0.1:0"]
    for d in server.data_dirs:
        cmd += ["--data", str(d)]
    env = dict(os.environ, FJORD_ACCESS_KEY=server.access_key, FJORD_SECRET_KEY=server.secret_key)
    return subprocess.run(cmd + list(extra), capture_output=True, text=True, timeout=30, env=env)


def data_files(directory):
    return sorted(f for _, _, files in os.walk(directory / "objects") for f in files)


def two_drives_with_objects(work, bucket):
    """A stopped server on two data directories holding 40 objects in `bucket`; the server and bodies."""
    server = FjordServer(work, data_dirs=2)
    server.start()
    try:
        s3 = make_client(server)
        s3.create_bucket(Bucket=bucket)
        bodies = {f"k{i}": os.urandom(64 * 1024 + i) for i in range(40)}
        for key, body in bodies.items():
            s3.put_object(Bucket=bucket, Key=key, Body=body)
    finally:
        server.stop()
    return server, bodies


def test_a_set_with_an_unmounted_drive_is_refused_and_nothing_is_removed(tmp_dir):
    """A data directory that is no longer a Fjord drive while the others are (a drive not mounted, or
    replaced) stops the start with a clear error: formatting it would hide what it held, and when it is
    the first one (the metadata), would remove every data file on the others as unreferenced."""
    server, bodies = two_drives_with_objects(tmp_dir / "unmounted", "kept")
    first, second = server.data_dirs
    on_second = data_files(second)
    assert on_second

    # The first directory (the metadata drive) is empty: refused, with or without the flag.
    hidden = first.with_name("first-drive-unmounted")
    first.rename(hidden)
    first.mkdir()
    result = serve_once(server)
    assert result.returncode != 0
    assert "holds the metadata journal" in result.stderr and "mount the drive" in result.stderr
    assert data_files(second) == on_second  # nothing removed as unreferenced
    result = serve_once(server, "--accept-empty-drive", str(first))
    assert result.returncode == 2 and "never formatted over the others" in result.stderr
    first.rmdir()
    hidden.rename(first)

    # The second directory is empty: refused unless the operator accepts it as a replacement.
    hidden = second.with_name("second-drive-unmounted")
    second.rename(hidden)
    second.mkdir()
    result = serve_once(server)
    assert result.returncode != 0
    assert f"--accept-empty-drive {second}" in result.stderr
    assert not (second / "FJORD_DRIVE").exists()

    # Mounted again: everything is there.
    second.rmdir()
    hidden.rename(second)
    server.start()
    try:
        s3 = make_client(server)
        for key, body in bodies.items():
            assert s3.get_object(Bucket="kept", Key=key)["Body"].read() == body
    finally:
        server.stop()


def test_an_accepted_replacement_drive_serves_what_it_can_and_reports_the_rest(tmp_dir):
    server, bodies = two_drives_with_objects(tmp_dir / "replaced", "half")
    second = server.data_dirs[1]
    lost = set(data_files(second))
    assert lost
    subprocess.run(["rm", "-rf", str(second)], check=True)
    second.mkdir()
    server.extra_args += ["--accept-empty-drive", str(second)]
    server.start()
    try:
        assert "in place of a lost one" in server.log_path.read_text(errors="replace")
        s3 = make_client(server)
        served = failed = 0
        for key, body in bodies.items():
            try:
                assert s3.get_object(Bucket="half", Key=key)["Body"].read() == body
                served += 1
            except ClientError as e:
                assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 500, e.response
                # The operator's log names the data file; the client is told nothing of the disk.
                assert e.response["Error"]["Message"] == \
                    "The stored data is damaged or missing; it is not served.", e.response["Error"]
                failed += 1
        assert served > 0 and failed == len(lost)
        s3.put_object(Bucket="half", Key="new", Body=b"after")
        assert s3.get_object(Bucket="half", Key="new")["Body"].read() == b"after"
    finally:
        server.stop()


def test_a_first_start_that_failed_partway_can_be_started_again(tmp_dir):
    """A first start that formats the first directory and then fails on the second (its parent does not
    exist yet) leaves a set that never held data: once the operator fixes the path, it starts."""
    work = tmp_dir / "partway"
    work.mkdir()
    first, second = work / "data0", work / "later" / "data1"
    env = dict(os.environ, FJORD_ACCESS_KEY="partwayaccess", FJORD_SECRET_KEY="partway-secret-key")
    cmd = [str(binary_path()), "serve", "--data", str(first), "--data", str(second),
           "--listen", "127.0.0.1:0"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode != 0 and (first / "FJORD_DRIVE").exists()
    (work / "later").mkdir()
    server = FjordServer(work / "second-try", data_dirs=0)
    server.data_dirs = [first, second]
    server.start()
    try:
        s3 = make_client(server)
        s3.create_bucket(Bucket="fresh")
        s3.put_object(Bucket="fresh", Key="k", Body=b"v")
        assert s3.get_object(Bucket="fresh", Key="k")["Body"].read() == b"v"
    finally:
        server.stop()
