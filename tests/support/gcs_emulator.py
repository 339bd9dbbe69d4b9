"""A real Google Cloud Storage JSON API on 127.0.0.1 for tests, with fault injection.

One child process (``python tests/support/gcs_emulator.py --state-dir DIR --bucket NAME``) runs

* the in-memory ``gcp-storage-emulator`` on a private loopback port, and
* a *front* server on one public loopback port that every client goes through:

  - ``CONNECT *.googleapis.com:443`` makes it an ``https_proxy`` for TensorFlow's libcurl, whose
    GCS endpoints are hard-coded: it terminates TLS with a certificate from a throw-away CA
    (``CURL_CA_BUNDLE``) and serves the decrypted requests. Other CONNECT targets are refused.
  - plain ``/storage/v1``, ``/upload/...``, ``/download/...``, ``/batch/...`` requests serve
    google-cloud-storage (Beam) through ``STORAGE_EMULATOR_HOST``;
  - ``GET|POST /_faults`` reads or sets the fault rules and reads the counters;
  - ``/computeMetadata/...`` (``GCE_METADATA_HOST``) is counted and answered 404, so a metadata
    probe never leaves the machine and a test can assert there was none.

  Fault rules apply to every storage request of both clients: a seeded share answered 503 and a
  seeded share of uploads dropped mid-body (the socket closed without an answer).

The front also smooths over emulator gaps so both clients work unchanged (``_adapt_request``,
``_local_answer``, ``_adapt_answer``): TF's chunked bodies, empty simple uploads, XML-API
downloads, bucket storageLayout, https session URLs, a wrong Range on empty resumable uploads,
and mediaLinks that lead back to whichever way in the reader uses.

The emulator runs in a separate process so that neither the pytest process's GIL nor its
TensorFlow threads starve it, and so that subprocesses (``xlnet train``) can share it.

``GcsEmulator`` is the parent side: ``GcsEmulator.start`` launches the process and waits for it.
"""
from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit

LOG = logging.getLogger("gcs_emulator")
LOOPBACK = "127.0.0.1"
TLS_HOSTS = ("www.googleapis.com", "storage.googleapis.com")
PROJECT = "xlnet-test"
READY_FILE = "ready.json"
# TensorFlow's GCS client sleeps before it retries a failed request: 1 s plus up to 1 s at random,
# doubled for each further retry of the request (GCS_RETRY_CONFIG_INIT_DELAY_TIME_US, 1 s by
# default). Under injected faults (a tenth of the requests) those sleeps were most of a run's time:
# 2 s and 4 s gaps after each 503 in the emulator's log. Its clients retry at once instead: the
# same retries, without the waiting. TensorFlow reads the setting at its import: children get it
# from ``GcsEmulator.env``, the pytest process from importing this module, which tests/conftest.py
# does before its pytest_configure imports TensorFlow.
CLIENT_RETRIES = {"GCS_RETRY_CONFIG_INIT_DELAY_TIME_US": "0"}
for _name, _value in CLIENT_RETRIES.items():
    os.environ.setdefault(_name, _value)
# Hop-by-hop headers (RFC 9110 7.6.1) are per connection; Content-Length, Server and Date are
# re-computed by whoever sends the message on.
_NOT_FORWARDED = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
                  "trailer", "transfer-encoding", "upgrade", "expect", "content-length", "server",
                  "date"}
_MEDIA_LINK = re.compile(rb'("mediaLink": ")https?://[^/"]+/')  # as the emulator's json.dumps writes it
_CERT_CONFIG = f"""\
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = {",".join(f"DNS:{host}" for host in TLS_HOSTS)},DNS:*.googleapis.com
authorityKeyIdentifier = keyid
"""


# ----------------------------------------------------------------------------------------------
# Server process
# ----------------------------------------------------------------------------------------------

class FaultRules:
    """Which requests fail, and how many did; shared by all front-server threads.

    A request's fate is drawn from the seed, the request (see ``request_key``) and how often the
    same request came before in the window, so it does not depend on unrelated traffic (a
    client's background call) in between. ``configure`` starts a new window: rules replaced,
    counters zeroed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.configure(fail_share=0.0, drop_upload_share=0.0, seed=0)

    def configure(self, fail_share: float, drop_upload_share: float, seed: int) -> None:
        """Replace the rules and zero the counters."""
        for share in (fail_share, drop_upload_share):
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"a share must be in [0, 1], got {share}")
        with self._lock:
            self._fail_share, self._drop_share, self._seed = fail_share, drop_upload_share, seed
            self._seen: Counter[str] = Counter()
            self._counts = dict(requests=0, unavailable=0, dropped_uploads=0, refused_connects=0,
                                metadata_requests=0)

    def decide(self, key: str, is_upload: bool) -> str | None:
        """Count one storage request; return "drop", "unavailable" or None (serve it)."""
        with self._lock:
            self._counts["requests"] += 1
            draw = random.Random(f"{self._seed}|{key}|{self._seen[key]}")  # str seeds are stable
            self._seen[key] += 1
            drop = draw.random() < self._drop_share
            fail = draw.random() < self._fail_share
            if drop and is_upload:
                self._counts["dropped_uploads"] += 1
                return "drop"
            if fail:
                self._counts["unavailable"] += 1
                return "unavailable"
            return None

    def count(self, name: str) -> None:
        """Count an event that is not a storage request (refused CONNECT, metadata probe)."""
        with self._lock:
            self._counts[name] += 1

    def snapshot(self) -> dict:
        """The rules and counters of the current window."""
        with self._lock:
            return dict(fail_share=self._fail_share, drop_upload_share=self._drop_share,
                        counts=dict(self._counts))


@dataclass
class Upstream:
    """A request as sent on to the emulator."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    """The emulator's response, as sent back to the client."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


class FrontServer(ThreadingHTTPServer):
    """The public port: HTTPS proxy for TensorFlow, plain HTTP for Beam, control endpoint."""

    daemon_threads = True

    def __init__(self, emulator_port: int, tls: ssl.SSLContext) -> None:
        super().__init__((LOOPBACK, 0), FrontHandler)
        self.emulator_port = emulator_port
        self.tls = tls
        self.faults = FaultRules()
        # The emulator is a single-threaded server over non-thread-safe storage: one request at
        # a time, and never more pending connections than its listen backlog (5) can hold.
        self.emulator_lock = threading.Lock()

    def handle_error(self, request, client_address) -> None:
        """Clients drop idle keep-alive connections as they like: log that without a traceback."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, ssl.SSLError)):
            LOG.info("connection from %s ended: %r", client_address, sys.exc_info()[1])
        else:
            super().handle_error(request, client_address)


class FrontHandler(BaseHTTPRequestHandler):
    """Serves one client connection of the front server (possibly turned into TLS by CONNECT)."""

    server: FrontServer
    protocol_version = "HTTP/1.1"  # keep-alive: libcurl and urllib3 reuse their connections
    timeout = 600  # an idle client connection ends its thread after this long
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall
    tunnel_host: str | None = None  # the googleapis host once CONNECT has set up TLS

    def do_CONNECT(self) -> None:  # noqa: N802 (http.server naming)
        """Terminate TLS for *.googleapis.com:443; refuse anything else."""
        host, _, port = self.path.rpartition(":")
        if not host.endswith(".googleapis.com") or port != "443":
            self._refuse(f"CONNECT to {self.path}")
            self.close_connection = True
            return
        self.send_response(HTTPStatus.OK, "Connection established")
        self.end_headers()
        self.wfile.flush()
        tls = self.server.tls.wrap_socket(self.connection, server_side=True)
        self.connection, self.tunnel_host = tls, host
        self.rfile, self.wfile = tls.makefile("rb"), tls.makefile("wb")
        self.close_connection = False  # handle() goes on reading requests, now through TLS

    def handle_expect_100(self) -> bool:
        """Send "100 Continue" at once: the TLS writer buffers, and libcurl waits 1 s for it."""
        answered = super().handle_expect_100()
        self.wfile.flush()
        return answered

    def do_GET(self) -> None:  # noqa: N802
        """Control endpoint, metadata trap or storage request."""
        if self.tunnel_host is None and self.path.startswith("/_faults"):
            self._reply_json(HTTPStatus.OK, self.server.faults.snapshot())
        elif self.tunnel_host is None and self.path.startswith("/computeMetadata/"):
            self.server.faults.count("metadata_requests")
            self._reply_json(HTTPStatus.NOT_FOUND, {"error": "gcs_emulator: no metadata server in tests"})
        else:
            self._serve_storage()

    def do_POST(self) -> None:  # noqa: N802
        """Set the fault rules, or a storage request."""
        if self.tunnel_host is None and self.path.startswith("/_faults"):
            rules = json.loads(self._read_body())
            try:
                self.server.faults.configure(**rules)
            except (TypeError, ValueError) as error:
                self._reply_json(HTTPStatus.BAD_REQUEST, {"error": str(error)})
                return
            self._reply_json(HTTPStatus.OK, self.server.faults.snapshot())
        else:
            self._serve_storage()

    def do_PUT(self) -> None:  # noqa: N802
        """A storage request."""
        self._serve_storage()

    def do_DELETE(self) -> None:  # noqa: N802
        """A storage request."""
        self._serve_storage()

    def do_PATCH(self) -> None:  # noqa: N802
        """A storage request."""
        self._serve_storage()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server signature)
        """Request lines go to the server's log file, not to stderr of the tests."""
        LOG.info("%s %s", self.tunnel_host or "plain", format % args)

    # -- storage requests ----------------------------------------------------------------------

    def _serve_storage(self) -> None:
        """Apply the fault rules, then answer locally or through the emulator."""
        if urlsplit(self.path).scheme:  # absolute URI: somebody uses us as an http_proxy
            self._read_body()
            self._refuse(self.path)
            return
        fault = self.server.faults.decide(request_key(self.command, self.path), self._is_upload())
        if fault == "drop":
            self._drop_mid_body()
            return
        body = self._read_body()
        if fault == "unavailable":
            self._reply_json(HTTPStatus.SERVICE_UNAVAILABLE,
                             {"error": {"code": 503, "message": "gcs_emulator: injected fault"}})
            return
        request = Upstream(self.command, self.path, self._forwarded_headers(), body)
        answer = self._local_answer(request)
        if answer is not None:
            self._reply_json(HTTPStatus.OK, answer)
            return
        self._relay(self._adapt_request(request))

    def _adapt_request(self, request: Upstream) -> Upstream:
        """Rewrite what TensorFlow sends into what the emulator understands, same meaning."""
        if self.tunnel_host == "storage.googleapis.com":
            # XML API media download GET /BUCKET/OBJECT: the same as the JSON API's alt=media.
            bucket, _, name = urlsplit(request.path).path.lstrip("/").partition("/")
            request.path = f"/download/storage/v1/b/{bucket}/o/{name}?alt=media"
        query = parse_qs(urlsplit(request.path).query)
        if query.get("uploadType") == ["media"] and not request.body:
            # The emulator crashes on an empty simple upload (TF's "dir/" markers): send the
            # same empty object as a multipart upload, which it stores.
            request.path = request.path.replace("uploadType=media", "uploadType=multipart")
            boundary = "gcs_emulator_boundary"
            request.headers["Content-Type"] = f"multipart/related; boundary={boundary}"
            request.body = (f"--{boundary}\r\nContent-Type: application/json\r\n\r\n"
                            f"{json.dumps({'name': query['name'][0]})}\r\n--{boundary}\r\n"
                            f"Content-Type: application/octet-stream\r\n\r\n\r\n--{boundary}--\r\n").encode()
        return request

    @staticmethod
    def _local_answer(request: Upstream) -> dict | None:
        """Answers for API calls the emulator lacks; None when the emulator should answer."""
        layout = re.fullmatch(r"/storage/v1/b/([^/?]+)/storageLayout(\?.*)?", request.path)
        if request.method == "GET" and layout:
            # TF asks before a directory rename; a flat bucket renames object by object.
            return {"kind": "storage#storageLayout", "bucket": layout.group(1), "location": "US",
                    "locationType": "multi-region", "hierarchicalNamespace": {"enabled": False}}
        return None

    def _relay(self, request: Upstream) -> None:
        """Send the request to the emulator and its (adapted) answer back to the client."""
        answer = self._ask_emulator(request)
        if answer is None:
            # The emulator raised in its handler. 501 is not retried by clients: fail fast.
            self._reply_json(HTTPStatus.NOT_IMPLEMENTED, {"error": {
                "code": 501, "message": f"gcs_emulator: emulator failed on {request.method} {request.path}"}})
            return
        self._adapt_answer(request, answer)
        self.send_response(answer.status, answer.reason)
        for name, value in answer.headers:
            if name.lower() not in _NOT_FORWARDED:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body)

    def _ask_emulator(self, request: Upstream) -> Answer | None:
        """The emulator's answer, or None when it closed the connection without one."""
        with self.server.emulator_lock:
            upstream = http.client.HTTPConnection(LOOPBACK, self.server.emulator_port, timeout=120)
            try:
                upstream.request(request.method, request.path, body=request.body, headers=request.headers)
                response = upstream.getresponse()
                return Answer(response.status, response.reason, response.getheaders(), response.read())
            except (http.client.RemoteDisconnected, ConnectionResetError) as error:
                LOG.error("emulator gave no answer to %s %s: %s", request.method, request.path, error)
                return None
            finally:
                upstream.close()

    def _adapt_answer(self, request: Upstream, answer: Answer) -> None:
        """Correct what the emulator gets wrong for this client, in place."""
        adapted = []
        for name, value in answer.headers:
            if name.lower() == "location" and self.tunnel_host:
                # The emulator builds the resumable-session URL from Host, as plain http.
                value = value.replace("http://", "https://", 1)
            if answer.status == 308 and name.lower() == "range" and value == "bytes=0-0":
                # The emulator says "first byte received" when it has none. Non-final chunks are
                # multiples of 256 KiB (GCS rule), so a pending upload never holds exactly one
                # byte: this means nothing, which GCS says with no Range header.
                continue
            adapted.append((name, value))
        answer.headers = adapted
        if "alt=media" not in request.path:  # metadata, not object bytes
            answer.body = self._point_media_links_here(answer.body)

    def _point_media_links_here(self, body: bytes) -> bytes:
        """Make every object's mediaLink (which the emulator fixes from the Host of the request
        that created the object) lead to this client's way in: Beam downloads by mediaLink, and
        a TF-written object's link would otherwise be http://www.googleapis.com."""
        origin = f"https://{self.tunnel_host}" if self.tunnel_host else f"http://{self.headers['Host']}"
        return _MEDIA_LINK.sub(b"\\1" + origin.encode() + b"/", body)

    # -- HTTP plumbing -------------------------------------------------------------------------

    def _refuse(self, what: str) -> None:
        self.server.faults.count("refused_connects")
        self._reply_json(HTTPStatus.FORBIDDEN, {"error": f"gcs_emulator proxy: {what} refused, "
                                                         "tests must not reach the network"})

    def _is_upload(self) -> bool:
        """Whether the request carries object bytes (the requests a dropped upload can hit)."""
        has_body = int(self.headers.get("Content-Length") or 0) > 0 or self._is_chunked()
        return self.command in ("POST", "PUT") and self.path.startswith("/upload/") and has_body

    def _is_chunked(self) -> bool:
        return "chunked" in self.headers.get("Transfer-Encoding", "").lower()

    def _read_body(self) -> bytes:
        """The request body, de-chunked: TF sends both Content-Length and chunked encoding, and
        chunked wins (RFC 9112 6.3) while the emulator would store the chunk framing."""
        if not self._is_chunked():
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        chunks = []
        while size := int(self.rfile.readline().split(b";")[0], 16):
            chunks.append(self.rfile.read(size))
            self.rfile.readline()  # CRLF after the chunk
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailer section
            pass
        return b"".join(chunks)

    def _drop_mid_body(self) -> None:
        """Read half the declared body, then close the socket without answering."""
        LOG.info("%s fault: %s %s dropped mid-body", self.tunnel_host or "plain", self.command, self.path)
        self.rfile.read(int(self.headers.get("Content-Length") or 0) // 2)
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _forwarded_headers(self) -> dict[str, str]:
        return {name: value for name, value in self.headers.items() if name.lower() not in _NOT_FORWARDED}

    def _reply_json(self, status: HTTPStatus, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def request_key(method: str, path: str) -> str:
    """What identifies a request across runs: method, path and query without the parameters
    that carry timestamps (resumable upload ids, generations)."""
    url = urlsplit(path)
    query = sorted((name, value) for name, value in parse_qsl(url.query, keep_blank_values=True)
                   if name not in ("upload_id", "generation"))
    return f"{method} {url.path}?{urlencode(query)}"


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throw-away CA and a *.googleapis.com server certificate it signed: (ca, cert, key)."""
    config = directory / "openssl.cnf"
    config.write_text(_CERT_CONFIG)
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    cert, key = directory / "server.pem", directory / "server.key"
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "7"]
    for command in (
            ["-extensions", "ca", "-keyout", ca_key, "-out", ca, "-subj", "/CN=gcs-emulator-test-ca"],
            ["-extensions", "server", "-CA", ca, "-CAkey", ca_key, "-keyout", key, "-out", cert,
             "-subj", f"/CN={TLS_HOSTS[0]}"]):
        subprocess.run(["openssl", "req", "-x509", "-config", config, *new_key, *command],
                       check=True, capture_output=True, timeout=60)
    return ca, cert, key


def start_emulator(bucket: str) -> int:
    """Serve an in-memory emulator holding ``bucket`` on a free loopback port; return the port."""
    from functools import partial

    from gcp_storage_emulator.server import RequestHandler
    from gcp_storage_emulator.storage import Storage

    # Not create_server(): it cannot bind port 0 and report the port it got.
    emulator = HTTPServer((LOOPBACK, 0), partial(RequestHandler, Storage(use_memory_fs=True)))
    threading.Thread(target=emulator.serve_forever, name="emulator", daemon=True).start()
    port = emulator.server_address[1]
    # Hard deletes: with the emulator's default 7-day soft delete, deleted objects stay in memory.
    for method, path, resource in (("POST", f"/storage/v1/b?project={PROJECT}", {"name": bucket}),
                                   ("PATCH", f"/storage/v1/b/{bucket}",
                                    {"softDeletePolicy": {"retentionDurationSeconds": "0"}})):
        connection = http.client.HTTPConnection(LOOPBACK, port, timeout=30)
        connection.request(method, path, json.dumps(resource), {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != HTTPStatus.OK:
            raise RuntimeError(f"emulator: {method} {path} -> {response.status} {response.read()!r}")
        connection.close()
    return port


def _exit_when_orphaned(parent_pid: int) -> None:
    """End this process once its parent is gone (a killed pytest must not leave it running)."""
    while os.getppid() == parent_pid:
        time.sleep(1)
    os.kill(os.getpid(), signal.SIGTERM)


def serve(state_dir: Path, bucket: str, parent_pid: int) -> None:
    """Run emulator and front server until terminated; ``state_dir/ready.json`` says where."""
    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)  # it warns on every write
    logging.getLogger("api").setLevel(logging.ERROR)
    ca, cert, key = make_certificates(state_dir)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    front = FrontServer(start_emulator(bucket), tls)
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    ready = state_dir / READY_FILE
    ready.with_suffix(".tmp").write_text(json.dumps({"port": front.server_address[1], "ca_file": str(ca)}))
    ready.with_suffix(".tmp").rename(ready)  # atomic: the parent never reads half a file
    LOG.info("serving bucket %s on port %d", bucket, front.server_address[1])
    front.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """Command line of the server process."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, required=True, help="certificates and ready.json go here")
    parser.add_argument("--bucket", required=True, help="bucket to create")
    parser.add_argument("--parent-pid", type=int, default=os.getppid(), help="exit when this process is gone")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(message)s")
    serve(args.state_dir, args.bucket, args.parent_pid)


# ----------------------------------------------------------------------------------------------
# Parent side
# ----------------------------------------------------------------------------------------------

@dataclass
class GcsEmulator:
    """A running emulator process, as seen by the tests.

    ``env`` holds every variable a process needs so that TensorFlow (``tf.io.gfile``) and Beam
    (``FileSystems``, google-cloud-storage) talk to it with gs:// paths, and nothing else.
    ``url``/``new_prefix`` name objects, ``set_faults``/``fault_counts`` drive fault injection,
    ``log_file`` has one line per request (and per injected drop).
    """

    process: subprocess.Popen
    port: int
    bucket: str
    env: dict[str, str]
    log_file: Path
    _prefixes: Counter[str] = field(default_factory=Counter)

    @classmethod
    def start(cls, state_dir: Path, bucket: str, timeout: float = 60.0) -> GcsEmulator:
        """Launch the server process and wait (at most ``timeout`` s) until it serves."""
        log_file = state_dir / "server.log"
        with open(log_file, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--state-dir", str(state_dir),
                 "--bucket", bucket, "--parent-pid", str(os.getpid())],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        ready = state_dir / READY_FILE
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                _stop(process)
                raise RuntimeError(f"GCS emulator did not start within {timeout:.0f} s (exit code "
                                   f"{process.returncode}); its log {log_file}:\n{_tail(log_file)}")
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        credentials = state_dir / "credentials.json"
        credentials.write_text(json.dumps(_FAKE_USER_CREDENTIALS))
        env = _client_env(info["port"], info["ca_file"], credentials)
        return cls(process, info["port"], bucket, env, log_file)

    def url(self, path: str = "") -> str:
        """``gs://BUCKET/path``."""
        return f"gs://{self.bucket}/{path.lstrip('/')}"

    def new_prefix(self, name: str) -> str:
        """A fresh ``gs://BUCKET/<name>-<n>/`` no other caller gets; n counts the calls with this
        name, so a test's object names (and injected faults) do not depend on which tests ran."""
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")
        self._prefixes[safe] += 1
        return self.url(f"{safe}-{self._prefixes[safe] - 1}/")

    def set_faults(self, fail_share: float = 0.0, drop_upload_share: float = 0.0, seed: int = 0) -> None:
        """Set the fault rules (0 shares: none) and zero the counters of ``fault_counts``.

        ``fail_share``: share of storage requests answered 503. ``drop_upload_share``: share of
        uploads whose connection is closed after half the body, without an answer.
        """
        self._control("POST", dict(fail_share=fail_share, drop_upload_share=drop_upload_share, seed=seed))

    def fault_counts(self) -> dict[str, int]:
        """Counters since the last ``set_faults``: requests (storage requests seen), unavailable
        (503s injected), dropped_uploads, refused_connects (non-googleapis targets),
        metadata_requests (GCE metadata probes)."""
        return self._control("GET")["counts"]

    def stop(self) -> None:
        """Terminate the server process (kill it if it does not end within 10 s)."""
        _stop(self.process)

    def _control(self, method: str, rules: dict | None = None) -> dict:
        connection = http.client.HTTPConnection(LOOPBACK, self.port, timeout=30)
        try:
            connection.request(method, "/_faults", body=None if rules is None else json.dumps(rules))
            response = connection.getresponse()
            answer = json.loads(response.read())
        except OSError as error:
            raise RuntimeError(f"GCS emulator (pid {self.process.pid}, exit code {self.process.poll()}) does "
                               f"not answer: {error}; its log {self.log_file}:\n{_tail(self.log_file)}") from error
        finally:
            connection.close()
        if response.status != HTTPStatus.OK:
            raise RuntimeError(f"GCS emulator refused {method} /_faults {rules}: {answer}")
        return answer


# google-auth never refreshes a token whose expiry is far away, so Beam's client needs no network.
_FAKE_USER_CREDENTIALS = {"type": "authorized_user", "client_id": "gcs-emulator", "client_secret": "unused",
                          "refresh_token": "unused", "token": "fake", "expiry": "2999-01-01T00:00:00Z"}


def _client_env(port: int, ca_file: str, credentials: Path) -> dict[str, str]:
    front = f"{LOOPBACK}:{port}"
    return {
        # TensorFlow: libcurl tunnels its hard-coded https://*.googleapis.com through the front.
        "https_proxy": f"http://{front}", "HTTPS_PROXY": f"http://{front}",
        "CURL_CA_BUNDLE": ca_file,
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "fake",  # TF's auth: no token files, no refresh
        "NO_GCE_CHECK": "true",  # TF: no metadata-server probe
        "GCS_STAT_CACHE_MAX_AGE": "0",  # TF: no 5 s stale stat answers after writes and deletes
        # Beam / google-cloud-storage: plain HTTP to the front, not through the proxy.
        "STORAGE_EMULATOR_HOST": f"http://{front}",
        "no_proxy": f"{LOOPBACK},localhost", "NO_PROXY": f"{LOOPBACK},localhost",
        "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        # Any metadata probe (TF or google-auth) lands on the front, which counts it.
        "GCE_METADATA_HOST": front, "GCE_METADATA_IP": front,
        **CLIENT_RETRIES,
    }


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


if __name__ == "__main__":
    main()
