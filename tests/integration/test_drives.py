"""Several data directories (--data repeated): objects spread over them, survive a restart, and a data
directory given in the wrong position is refused at start."""

import os
import subprocess

import pytest

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
