"""Fixtures for the integration suite: a real `fjord serve` process and real S3 clients.

Environment knobs:
  FJORD_BINARY      server binary (default: build/release/fjord under the repository root)
  FJORD_TEST_SEED   seed for all generated data (default: random; printed in the report header)
  FJORD_KEEP_TMP=1  keep the session's temporary directory (server data, logs, client configs)
"""

from __future__ import annotations

import atexit
import ctypes
import itertools
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
import pytest
import requests
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3util  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
ACCESS_KEY = "FJORDTESTACCESSKEY01"
SECRET_KEY = "fjord/test+Secret/Key/0123456789abcdefghij"
REGION = "us-east-1"
READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 20.0
CLIENT_TIMEOUT_S = 120.0
LOG_TAIL_LINES = 60

SEED = int(os.environ["FJORD_TEST_SEED"]) if os.environ.get("FJORD_TEST_SEED") else random.randrange(2**32)

# ---------------------------------------------------------------------------------------------------
# Session temporary directory and a clean client environment
# ---------------------------------------------------------------------------------------------------

_SESSION_TMP = Path(tempfile.mkdtemp(prefix="fjord-it-"))
_EMPTY_AWS_CONFIG = _SESSION_TMP / "aws-config"
_EMPTY_AWS_CONFIG.write_text("")
_EMPTY_AWS_CREDENTIALS = _SESSION_TMP / "aws-credentials"
_EMPTY_AWS_CREDENTIALS.write_text("")


def _scrub_environment(env: dict) -> dict:
    """No AWS_* or RCLONE_* settings of the machine leak into a client (AWS_CA_BUNDLE, for one, breaks
    rclone's plain-HTTP transport; a profile could change checksum or addressing behaviour)."""
    clean = {k: v for k, v in env.items() if not k.startswith(("AWS_", "RCLONE_", "FJORD_"))}
    clean.update({
        "AWS_CONFIG_FILE": str(_EMPTY_AWS_CONFIG),
        "AWS_SHARED_CREDENTIALS_FILE": str(_EMPTY_AWS_CREDENTIALS),
        "AWS_EC2_METADATA_DISABLED": "true",
    })
    return clean


# The in-process boto3 clients read the same environment: clean it once, for the whole session.
for _name in [n for n in os.environ if n.startswith("AWS_")]:
    del os.environ[_name]
os.environ.update(_scrub_environment({}))

_RUNNING: list = []  # every FjordServer that may still have a process, for the atexit safety net
_ALL_SERVERS: list = []  # every FjordServer made in this session, for log tails on failure


@atexit.register
def _kill_leftovers():
    for server in list(_RUNNING):
        server.kill()
    if not os.environ.get("FJORD_KEEP_TMP"):
        shutil.rmtree(_SESSION_TMP, ignore_errors=True)


def pytest_report_header(config):
    return [f"fjord: binary={binary_path()} seed={SEED} (replay with FJORD_TEST_SEED={SEED}) "
            f"tmp={_SESSION_TMP}"]


def binary_path() -> Path:
    configured = os.environ.get("FJORD_BINARY")
    path = Path(configured) if configured else REPO_ROOT / "build" / "release" / "fjord"
    return path if path.is_absolute() else REPO_ROOT / path


# ---------------------------------------------------------------------------------------------------
# The server process
# ---------------------------------------------------------------------------------------------------

def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """Runs in the child before exec: the server gets SIGKILL if the test process dies (PR_SET_PDEATHSIG).
    Servers are started from the main thread only, since the signal follows the creating thread."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


class FjordServer:
    """One `fjord serve` process over a fixed set of data directories. Can be stopped (SIGTERM),
    killed (SIGKILL) and started again on the same data and the same port."""

    def __init__(self, work_dir: Path, data_dirs: int = 1, extra_args=(), cores: int = 2,
                 access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY, name: str = "fjord",
                 tls=None):
        """tls: a tls_ca.ServerCertificate; the server then speaks HTTPS with it."""
        self.name = name
        self.tls = tls
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.data_dirs = [self.work_dir / f"data{i}" for i in range(data_dirs)]
        for d in self.data_dirs:
            d.mkdir(exist_ok=True)
        self.log_path = self.work_dir / "server.log"
        self.extra_args = list(extra_args)
        self.cores = cores
        self.access_key = access_key
        self.secret_key = secret_key
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.starts = 0
        _ALL_SERVERS.append(self)

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def credentials(self) -> s3util.Credentials:
        return s3util.Credentials(self.access_key, self.secret_key, REGION)

    def command(self) -> list[str]:
        cmd = [str(binary_path()), "serve"]
        for d in self.data_dirs:
            cmd += ["--data", str(d)]
        cmd += ["--listen", self.host, "--cores", str(self.cores)] + self.extra_args
        if self.tls:
            cmd += ["--tls-cert", str(self.tls.cert_path), "--tls-key", str(self.tls.key_path)]
        return cmd

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S):
        assert self.process is None or self.process.poll() is not None, "server already running"
        if not binary_path().exists():
            pytest.fail(f"fjord binary not found at {binary_path()} (build it, or set FJORD_BINARY)",
                        pytrace=False)
        env = dict(os.environ)
        env.update({"FJORD_ACCESS_KEY": self.access_key, "FJORD_SECRET_KEY": self.secret_key})
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== test harness: start #{self.starts}: {' '.join(self.command())}\n".encode())
            log.flush()
            self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=log, env=env, cwd=self.work_dir,
                                            preexec_fn=_die_with_parent)
        _RUNNING.append(self)
        self.wait_ready(ready_timeout_s)

    def is_ready(self) -> bool:
        try:
            return requests.get(f"{self.endpoint}/health/ready", timeout=1,
                                verify=str(self.tls.ca_path) if self.tls else True).status_code == 200
        except requests.RequestException:
            return False

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S):
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited with status {self.process.returncode} before "
                                     f"it was ready; log tail:\n{self.log_tail()}")
            if self.is_ready():
                return
            if time.monotonic() >= deadline:
                raise AssertionError(f"{self.name} not ready after {timeout_s} s; log tail:\n"
                                     f"{self.log_tail()}")
            time.sleep(0.05)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait. Returns the exit status; kills and raises if it does not exit in time."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            status = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not exit within {timeout_s} s of SIGTERM")
        finally:
            self._forget()
        return status

    def kill(self):
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_S)
        self._forget()

    def restart(self, ready_timeout_s: float = READY_TIMEOUT_S) -> int | None:
        status = self.stop()
        self.start(ready_timeout_s)
        return status

    def _forget(self):
        if self in _RUNNING:
            _RUNNING.remove(self)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def client(self, addressing_style: str = "path", access_key: str | None = None,
               secret_key: str | None = None, **config):
        return make_client(self, addressing_style, access_key, secret_key, **config)


def make_client(server: FjordServer, addressing_style: str = "path", access_key: str | None = None,
                secret_key: str | None = None, **config):
    """A boto3 S3 client with default checksum behaviour. Retries are off so that a server error is
    seen by the test instead of being papered over by a second attempt."""
    options = dict(region_name=REGION, s3={"addressing_style": addressing_style},
                   retries={"total_max_attempts": 1, "mode": "standard"},
                   connect_timeout=10, read_timeout=60)
    options.update(config)
    endpoint = server.endpoint
    if addressing_style == "virtual":
        endpoint = f"{'https' if server.tls else 'http'}://localhost:{server.port}"
    client = boto3.session.Session().client(
        "s3", endpoint_url=endpoint, config=Config(**options),
        verify=str(server.tls.ca_path) if server.tls else None,
        aws_access_key_id=access_key or server.access_key,
        aws_secret_access_key=secret_key or server.secret_key)
    if addressing_style == "virtual":
        # <bucket>.localhost does not resolve on every machine: connect to 127.0.0.1, keep the Host
        # header (and the signature over it) that names the bucket.
        def route_to_loopback(request, **_):
            netloc = s3util.url_host(request.url)
            request.headers["Host"] = netloc
            request.url = request.url.replace(netloc, server.host, 1)
        client.meta.events.register("before-send.s3", route_to_loopback)
    return client


def fetch_metrics(server: FjordServer, signed: bool = True) -> requests.Response:
    """GET /metrics, SigV4-signed (the default requirement) or anonymous (for --metrics-public)."""
    headers = s3util.sign_headers(server.credentials, "GET", server.host, "/metrics").headers if signed else {}
    return requests.get(f"{server.endpoint}/metrics", headers=headers, timeout=10,
                        verify=str(server.tls.ca_path) if server.tls else True)


def metric_value(text: str, series: str) -> int:
    """The value of one sample in Prometheus text, named with its labels exactly as the server writes
    them: 'fjord_slowdown_total' or 'fjord_requests_total{operation="read",status="2xx"}'."""
    values = [line[len(series) + 1:] for line in text.splitlines() if line.startswith(series + " ")]
    assert len(values) == 1, f"{series}: {len(values)} samples in\n{text}"
    return int(values[0])


def server_metric(server: FjordServer, series: str) -> int:
    response = fetch_metrics(server)
    assert response.status_code == 200, response.text
    return metric_value(response.text, series)


# ---------------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def session_tmp() -> Path:
    return _SESSION_TMP


_SESSION_SERVER: list = []  # the shared server once started, for the crash check after each test


@pytest.fixture(scope="session")
def fjord_server(session_tmp):
    """The shared server. Tests that stop or kill a server start their own with `make_server`."""
    server = FjordServer(session_tmp / "server-main", name="fjord-main")
    server.start()
    _SESSION_SERVER.append(server)
    yield server
    _SESSION_SERVER.clear()
    status = server.stop()
    assert status == 0, f"fjord exited with status {status} after SIGTERM; log tail:\n{server.log_tail()}"


@pytest.fixture(autouse=True)
def _shared_server_survives():
    """After each test: if the shared server died, say so in this test's report (with the log tail)
    and start it again on the same data, so that one crash does not fail every later test."""
    yield
    if _SESSION_SERVER and _SESSION_SERVER[0].process.poll() is not None:
        server = _SESSION_SERVER[0]
        status = server.process.returncode
        tail = server.log_tail()
        server._forget()
        server.start()
        pytest.fail(f"{server.name} died during this test (exit status {status}); restarted it. "
                    f"Log tail:\n{tail}", pytrace=False)


@pytest.fixture
def make_server(tmp_dir):
    """Factory for a private server on a private data directory; all are killed at teardown."""
    servers = []

    def factory(extra_args=(), data_dirs=1, name="fjord-private", tls=None):
        server = FjordServer(tmp_dir / f"server{len(servers)}", data_dirs, extra_args, name=name,
                             tls=tls)
        servers.append(server)
        server.start()
        return server

    yield factory
    for server in servers:
        server.kill()


@pytest.fixture
def tmp_dir(request, session_tmp) -> Path:
    """A per-test directory under the session directory (removed with it at the end)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:80]
    path = Path(tempfile.mkdtemp(prefix=name + "-", dir=session_tmp))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def rng(request) -> random.Random:
    """Per-test generator derived from the session seed and the test id: replayable in isolation."""
    return random.Random(f"{SEED}:{request.node.nodeid}")


@pytest.fixture(scope="session")
def s3(fjord_server):
    return fjord_server.client()


@pytest.fixture(scope="session")
def s3_virtual(fjord_server):
    return fjord_server.client(addressing_style="virtual")


@pytest.fixture(scope="session")
def creds(fjord_server) -> s3util.Credentials:
    return fjord_server.credentials


_BUCKET_COUNTER = itertools.count()


def make_kv_bucket(s3, bucket: str, acl=None, ownership=None, **options):
    """CreateBucket of a KV bucket (docs/kv.md) through a boto3 client: x-fjord-bucket-type: kv, and
    each option as x-fjord-kv-<name> (capacity_bytes, ttl_seconds, write_ack); `acl`: a canned ACL,
    `ownership`: an Object Ownership."""
    headers = {"x-fjord-bucket-type": "kv"}
    for name, value in options.items():
        headers["x-fjord-kv-" + name.replace("_", "-")] = str(value)

    def add(request, **_):
        for name, value in headers.items():
            request.headers[name] = value

    s3.meta.events.register_first("before-sign.s3.CreateBucket", add)
    try:
        named = {"ACL": acl, "ObjectOwnership": ownership}
        s3.create_bucket(Bucket=bucket, **{k: v for k, v in named.items() if v})
    finally:
        s3.meta.events.unregister("before-sign.s3.CreateBucket", add)


def unique_bucket_name(hint: str = "t") -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", hint.lower()).strip("-")[:30] or "t"
    return f"it-{slug}-{next(_BUCKET_COUNTER)}-{random.SystemRandom().getrandbits(32):08x}"


@pytest.fixture
def bucket_name(request) -> str:
    return unique_bucket_name(request.node.originalname)


def empty_and_delete_bucket(client, bucket: str):
    """Best effort: used in teardown, where the server may already be gone. Removes every version and
    delete marker, as bucket-cleanup tools do."""
    try:
        for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
            for item in page.get("Versions", []) + page.get("DeleteMarkers", []):
                client.delete_object(Bucket=bucket, Key=item["Key"], VersionId=item["VersionId"])
        client.delete_bucket(Bucket=bucket)
    except Exception:  # noqa: BLE001 - teardown must not mask the test's own failure
        pass


@pytest.fixture
def bucket(s3, bucket_name):
    """A fresh bucket on the shared server, emptied and deleted afterwards."""
    s3.create_bucket(Bucket=bucket_name)
    yield bucket_name
    empty_and_delete_bucket(s3, bucket_name)


# ---------------------------------------------------------------------------------------------------
# Command-line clients
# ---------------------------------------------------------------------------------------------------

class ToolRunner:
    """Runs one command-line client with a private configuration and a clean environment."""

    def __init__(self, argv_prefix: list[str], env: dict, cwd: Path):
        self.argv_prefix = argv_prefix
        self.env = env
        self.cwd = cwd

    def __call__(self, *args, check: bool = True, timeout_s: float = CLIENT_TIMEOUT_S):
        argv = self.argv_prefix + [str(a) for a in args]
        result = subprocess.run(argv, env=self.env, cwd=self.cwd, capture_output=True,
                                timeout=timeout_s, stdin=subprocess.DEVNULL)
        result.stdout_text = result.stdout.decode(errors="replace")
        result.stderr_text = result.stderr.decode(errors="replace")
        if check:
            assert result.returncode == 0, (
                f"{' '.join(argv)} exited with {result.returncode}\nstdout:\n{result.stdout_text}\n"
                f"stderr:\n{result.stderr_text}")
        return result


@pytest.fixture(scope="session")
def aws_cli(fjord_server, session_tmp):
    aws = REPO_ROOT / ".venv-awscli" / "bin" / "aws"
    if not aws.exists():
        pytest.fail(f"{aws} missing: run scripts/bootstrap.sh", pytrace=False)
    env = _scrub_environment(dict(os.environ))
    env.update({"AWS_ACCESS_KEY_ID": fjord_server.access_key,
                "AWS_SECRET_ACCESS_KEY": fjord_server.secret_key,
                "AWS_DEFAULT_REGION": REGION,
                "AWS_MAX_ATTEMPTS": "1"})
    return ToolRunner([str(aws), "--endpoint-url", fjord_server.endpoint], env, session_tmp)


@pytest.fixture(scope="session")
def s3cmd(fjord_server, session_tmp):
    binary = shutil.which("s3cmd")
    if binary is None:
        pytest.fail("s3cmd not installed: run scripts/bootstrap.sh", pytrace=False)
    config = session_tmp / "s3cmd.cfg"
    config.write_text("\n".join([
        "[default]",
        f"access_key = {fjord_server.access_key}",
        f"secret_key = {fjord_server.secret_key}",
        f"host_base = {fjord_server.host}",
        f"host_bucket = {fjord_server.host}",
        f"bucket_location = {REGION}",
        "use_https = False",
        "signature_v2 = False",
        "check_ssl_certificate = False",
        "progress_meter = False",
        "",
    ]))
    env = _scrub_environment(dict(os.environ))
    env["HOME"] = str(session_tmp)  # no ~/.s3cfg of the user
    return ToolRunner([binary, "-c", str(config), "--no-progress"], env, session_tmp)


@pytest.fixture(scope="session")
def rclone(fjord_server, session_tmp):
    binary = shutil.which("rclone")
    if binary is None:
        pytest.fail("rclone not installed: run scripts/bootstrap.sh", pytrace=False)
    config = session_tmp / "rclone.conf"
    config.write_text("")
    env = _scrub_environment(dict(os.environ))
    env.update({
        "RCLONE_CONFIG_FJORD_TYPE": "s3",
        "RCLONE_CONFIG_FJORD_PROVIDER": "Other",
        "RCLONE_CONFIG_FJORD_ENDPOINT": fjord_server.endpoint,
        "RCLONE_CONFIG_FJORD_ACCESS_KEY_ID": fjord_server.access_key,
        "RCLONE_CONFIG_FJORD_SECRET_ACCESS_KEY": fjord_server.secret_key,
        "RCLONE_CONFIG_FJORD_REGION": REGION,
        "RCLONE_CONFIG_FJORD_FORCE_PATH_STYLE": "true",
    })
    return ToolRunner([binary, "--config", str(config), "--retries", "1", "--low-level-retries", "1",
                       "--contimeout", "10s", "--timeout", "60s"], env, session_tmp)


# ---------------------------------------------------------------------------------------------------
# Reporting: the server's log tail goes with every failure
# ---------------------------------------------------------------------------------------------------

_TEST_STARTED_AT = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_TEST_STARTED_AT] = time.time() - 1.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("replay", f"FJORD_TEST_SEED={SEED} {_interpreter()} -m pytest "
                                          f"'tests/integration/{item.nodeid}'"))
        for server in _servers_touched_by(item):
            report.sections.append((f"{server.name} log tail ({server.log_path})", server.log_tail()))


def _interpreter() -> str:
    """The Python running the suite, as the replay line should name it (.venv, or .venv-torch)."""
    try:
        return str(Path(sys.executable).relative_to(REPO_ROOT))
    except ValueError:
        return sys.executable


def _servers_touched_by(item) -> list[FjordServer]:
    """Servers whose log was written while the test ran (any request makes the server log)."""
    started_at = item.stash.get(_TEST_STARTED_AT, 0.0)
    touched = []
    for server in _ALL_SERVERS:
        try:
            if server in _RUNNING or server.log_path.stat().st_mtime >= started_at:
                touched.append(server)
        except OSError:
            pass
    return touched
