"""The data path in the shapes other than the default: buffers on 4 KiB pages (--no-huge-pages) and data
writes cut into 256 KiB pieces (--disk-write-kib 256), byte-exact through PUT, GET and ranges; and the
start-up line that says whether the I/O buffers got huge pages."""

import hashlib
import os
import re

from conftest import make_client

SIZES = [0, 1, 256 * 1024 - 1, 5 * 1024 * 1024 + 1, 9 * 1024 * 1024 + 4097]


def buffer_line(server) -> str:
    text = server.log_path.read_text(errors="replace")
    match = re.search(r"I/O buffers: (\d+) x (\d+) KiB per core, (\d+) of (\d+) MiB on huge pages", text)
    assert match, f"no I/O buffer line in the server log:\n{server.log_tail()}"
    return match


def round_trip(server, bucket):
    s3 = make_client(server)
    s3.create_bucket(Bucket=bucket)
    bodies = {f"k{size}": os.urandom(size) for size in SIZES}
    for key, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    for key, body in bodies.items():
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest(), key
        if len(body) > 300_000:  # a range across piece boundaries
            first, last = 200_000, len(body) - 3
            part = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={first}-{last}")["Body"].read()
            assert part == body[first:last + 1], key


def test_small_pages_and_small_write_pieces_round_trip(make_server):
    server = make_server(["--no-huge-pages", "--disk-write-kib", "256", "--buffers", "16"])
    line = buffer_line(server)
    assert (line[1], line[2], line[3], line[4]) == ("16", "1024", "0", "16")
    round_trip(server, "shapes")


def test_serve_says_how_much_buffer_memory_got_huge_pages(make_server):
    server = make_server(["--buffers", "8"])
    line = buffer_line(server)
    count, kib, huge, total = (int(x) for x in line.groups())
    assert (count, kib, total) == (8, 1024, 8)
    assert 0 <= huge <= total
    if huge < total / 2:  # the kernel gave none: the warning says so and names its settings
        assert "most I/O buffers are on 4 KiB pages (transparent huge pages:" in server.log_path.read_text()
    round_trip(server, "defaults")
