#!/usr/bin/env python3
"""The invoker over HTTPS with mutual TLS: certificates made with the openssl CLI, an endpoint
served by Python's ssl module that demands a client certificate and checks the signature."""
import hashlib
import hmac
import http.server
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

FUSEE = sys.argv[1]
work = tempfile.mkdtemp(prefix="fusee-https-")
checks = failures = 0
seen = []  # (signature ok, client certificate subject)


def check(name, cond):
    global checks, failures
    checks += 1
    print(("ok   " if cond else "FAIL ") + name)
    if not cond:
        failures += 1


def sh(*args):
    subprocess.run(args, cwd=work, check=True, capture_output=True)


def make_cert(name, cn, san=None):
    sh("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
       "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}")
    args = ["openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "1"]
    if san:
        with open(os.path.join(work, f"{name}.ext"), "w") as f:
            f.write(f"subjectAltName={san}\n")
        args += ["-extfile", f"{name}.ext"]
    sh(*args)


server = None
try:
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
       "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=fusee-test-ca")
    make_cert("endpoint", "127.0.0.1", "IP:127.0.0.1")
    make_cert("client", "fusee-server")
    secret = b"s3cret-s3cret-s3cret"
    with open(os.path.join(work, "secret"), "wb") as f:
        f.write(secret + b"\n")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["content-length"]))
            parts = dict(p.split("=", 1) for p in self.headers["fusee-signature"].split(","))
            want = hmac.new(secret, parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
            cert = self.connection.getpeercert()
            subject = dict(x[0] for x in cert["subject"]) if cert else {}
            seen.append((hmac.compare_digest(want, parts["v1"]), subject.get("commonName")))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(work, "endpoint.pem"), os.path.join(work, "endpoint.key"))
    ctx.load_verify_locations(os.path.join(work, "ca.pem"))
    ctx.verify_mode = ssl.CERT_REQUIRED  # mutual TLS
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]

    with open(os.path.join(work, "fusee.toml"), "w") as f:
        f.write(f"""[server]
shards = 2
[[endpoint]]
url = "https://127.0.0.1:{port}/invoke"
secret_file = "secret"
ca_file = "ca.pem"
cert_file = "client.pem"
key_file = "client.key"
""")
    ready = os.path.join(work, "ready")
    server = subprocess.Popen([FUSEE, "server", "--config", os.path.join(work, "fusee.toml"),
                               "--data-dir", os.path.join(work, "data"), "--listen",
                               "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--http-listen", "off", "--inspect-listen", "off", "--ready-file",
                               ready], stderr=open(os.path.join(work, "server.log"), "w"))
    deadline = time.time() + 20
    while not os.path.exists(ready) and time.time() < deadline:
        time.sleep(0.02)
    admin = [l.split(":")[-1] for l in open(ready).read().split() if l.startswith("admin=")][0]
    m = {}
    while time.time() < deadline:
        m = json.load(urllib.request.urlopen(f"http://127.0.0.1:{admin}/v1/invoker"))
        if m["endpoints"][0]["invocations"] >= 1 and m["endpoints"][0]["inFlight"] == 0:
            break
        time.sleep(0.05)
    ep = m["endpoints"][0]
    check("the invocation went out over HTTPS", ep["invocations"] >= 1)
    check("the endpoint saw our client certificate", any(cn == "fusee-server" for _, cn in seen))
    check("the endpoint verified the signature", bool(seen) and all(ok for ok, _ in seen))
    check("a 2xx without a lease counts as unleased, not failed",
          ep["unleased"] >= 1 and ep["failed"] == 0)
finally:
    if server:
        server.send_signal(signal.SIGKILL)
        server.wait()
    shutil.rmtree(work, ignore_errors=True)

print(f"{checks - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
