"""Start-up: what the log says before the server answers, and which credentials it refuses to start with.

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
DEFAULT_SECRET = "fjordadmin-secret"  # README.md's development pair


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


def run_to_exit(work_dir, args, env_extra, listen_host="127.0.0.1"):
    process, _, log_path = spawn(work_dir, args, env_extra, listen_host)
    try:
        status = process.wait(timeout=20)
    finally:
        if process.poll() is None:
            stop(process)
    return status, log_path.read_text(errors="replace")


def test_the_development_credentials_are_refused_on_a_non_loopback_address(tmp_dir):
    status, output = run_to_exit(tmp_dir / "public", [], {}, listen_host="0.0.0.0")
    assert status == 2, output
    assert "development credentials" in output and "FJORD_ACCESS_KEY" in output
    assert DEFAULT_SECRET not in output


def test_the_development_credentials_on_loopback_start_and_the_secret_is_never_logged(tmp_dir):
    process, port, log_path = spawn(tmp_dir / "dev", [], {})
    try:
        assert first_ready_answer(port, process), log_path.read_text(errors="replace")
    finally:
        stop(process)
    text = log_path.read_text(errors="replace")
    assert "using the development credentials (access key 'fjordadmin'" in text
    assert DEFAULT_SECRET not in text


@pytest.mark.parametrize("access, secret", [
    ("fjord-user", "short"),           # under 8 characters
    ("fjord-user", "        "),        # only whitespace
    ("fjord-user", "tab\tin-secret"),  # a control character
    ("has space", "long-enough-secret"),
    ("ab", "long-enough-secret"),      # access key under 3 characters
], ids=["short-secret", "blank-secret", "control-in-secret", "space-in-access-key", "short-access-key"])
def test_weak_or_malformed_credentials_are_refused(tmp_dir, access, secret):
    status, output = run_to_exit(tmp_dir / "weak", [], {"FJORD_ACCESS_KEY": access, "FJORD_SECRET_KEY": secret})
    assert status == 2, output
    assert "fjord serve:" in output
    if len(secret.strip()) > 3:
        assert secret not in output, "the refusal must not repeat the secret"


def test_chosen_credentials_start_on_any_address(tmp_dir):
    process, port, log_path = spawn(tmp_dir / "chosen", [],
                                    {"FJORD_ACCESS_KEY": "chosen-user", "FJORD_SECRET_KEY": "chosen-user-secret"},
                                    listen_host="0.0.0.0")
    try:
        assert first_ready_answer(port, process), log_path.read_text(errors="replace")
    finally:
        stop(process)
    assert "chosen-user-secret" not in log_path.read_text(errors="replace")


@pytest.mark.parametrize("args, says", [
    (["--cores", "0"], "--cores takes a number from 1 to 256"),
    (["--cores"], "--cores takes a number from 1 to 256"),          # the value is missing
    (["--disk-write-kib", "6"], "--disk-write-kib takes a number from 4 to 8192, a multiple of 4"),
    (["--io-size-kib", "-1"], "--io-size-kib takes a number from 512 to 8192"),
    # Past int64: these used to wrap to a negative timeout or age and start anyway.
    (["--idle-timeout-ms", "18446744073709551615"], "--idle-timeout-ms takes a number from 1 to"),
    (["--multipart-expiry-seconds", "9223372036854775807"], "--multipart-expiry-seconds takes a number from 1 to"),
    (["--log-level", "loud"], "--log-level needs a valid value"),
    (["--no-such-option"], "unknown option --no-such-option"),
], ids=["zero-cores", "missing-value", "not-a-multiple", "negative", "timeout-past-int64", "age-past-int64",
        "bad-level", "unknown"])
def test_bad_option_values_are_refused_with_what_the_option_takes(tmp_dir, args, says):
    status, output = run_to_exit(tmp_dir / "options", args, {})
    assert status == 2, output
    assert f"fjord serve: {says}" in output, output
