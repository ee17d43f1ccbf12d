"""Start-up: what the log says before the server answers.

The server is started here by hand (not by FjordServer), so that readiness can be polled as fast as a
socket allows and the environment holds exactly the credentials each test means."""

import os
import socket
import subprocess
import time

import pytest

from conftest import binary_path, free_port, _die_with_parent, _scrub_environment

BUFFER_LINE = "I/O buffers: "
LISTEN_LINE = "Fjord S3 server listening on"


def spawn(work_dir, args, env_extra=None, listen_host="127.0.0.1"):
    port = free_port()
    (work_dir / "data").mkdir(parents=True, exist_ok=True)
    log_path = work_dir / "server.log"
    env = _scrub_environment(dict(os.environ))
    env.update(env_extra or {})
    cmd = [str(binary_path()), "serve", "--data", str(work_dir / "data"), "--listen", f"{listen_host}:{port}"] + args
    log = open(log_path, "ab")
    process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=work_dir,
                               preexec_fn=_die_with_parent)
    log.close()
    return process, port, log_path


def first_ready_answer(port, process, timeout_s=20.0) -> bool:
    """Polls GET /health/ready with a raw socket every millisecond; True once it answers 200."""
    request = f"GET /health/ready HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(request)
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return True
        except OSError:
            pass
        time.sleep(0.001)
    return False


def stop(process):
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_every_start_up_line_is_in_the_log_before_the_first_answer(tmp_dir):
    """The log is read the moment the server first answers: with two cores, the core that does not write
    the start-up lines used to answer before the other had written them (a flaky suite)."""
    for attempt in range(12):
        process, port, log_path = spawn(tmp_dir / f"start{attempt}",
                                        ["--cores", "2", "--buffers", "8"],
                                        {"FJORD_ACCESS_KEY": "startup-test", "FJORD_SECRET_KEY": "startup-test-secret"})
        try:
            assert first_ready_answer(port, process), log_path.read_text(errors="replace")
            text = log_path.read_text(errors="replace")
            assert BUFFER_LINE in text and LISTEN_LINE in text, f"start {attempt}: log so far:\n{text}"
        finally:
            stop(process)
