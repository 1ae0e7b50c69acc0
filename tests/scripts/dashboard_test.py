#!/usr/bin/env python3
"""The dashboard in headless Chromium (Debian's `chromium`): a real server whose only endpoint
fails (nothing listens on port 1) and a `fusee worker` holding two shards. The page must load
with no script errors, render more than once, and show the held shards and the failing endpoint.
A screenshot is kept in BUILD/test-artifacts/dashboard.png.

Usage: dashboard_test.py FUSEE_BINARY BUILD_DIR
"""
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request


def wait_for(pred, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)  # polling a file or an HTTP view
    raise SystemExit(f"dashboard test: timed out waiting for {what}")


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def chromium(args, timeout=90):
    exe = shutil.which("chromium")
    if not exe:
        raise SystemExit("dashboard test: chromium is not installed (Debian package chromium; make deps)")
    base = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--disable-extensions", "--enable-logging=stderr", "--v=0",
            "--window-size=1280,1100", "--virtual-time-budget=6000"]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=timeout)


def main():
    fusee, build = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="fusee-dashboard-")
    procs = []
    try:
        secret = os.path.join(work, "ep.secret")
        with open(secret, "w") as f:
            f.write("s3cret-s3cret-s3cret\n")
        with open(os.path.join(work, "fusee.toml"), "w") as f:
            f.write('[server]\nshards = 256\n[[endpoint]]\nurl = "http://127.0.0.1:1/invoke"\n'
                    f'secret_file = "{secret}"\n')
        ready = os.path.join(work, "ready")
        server_log = open(os.path.join(work, "server.log"), "w")
        procs.append(subprocess.Popen(
            [fusee, "server", "--config", os.path.join(work, "fusee.toml"), "--data-dir",
             os.path.join(work, "data"), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
             "--http-listen", "off", "--inspect-listen", "off", "--ready-file", ready],
            stdout=server_log, stderr=server_log))
        wait_for(lambda: os.path.exists(ready), "the server's ready file")
        addr = dict(l.strip().split("=", 1) for l in open(ready) if "=" in l)
        admin = "http://" + addr["admin"]
        worker_log = open(os.path.join(work, "worker.log"), "w")
        procs.append(subprocess.Popen(
            [fusee, "worker", "--server", addr["listen"], "--max-shards", "2", "--name", "dash"],
            stdout=worker_log, stderr=worker_log))
        wait_for(lambda: '"held":2' in get(admin + "/v1/shards?limit=0"), "two held shards")
        wait_for(lambda: '"state":"backoff"' in get(admin + "/v1/endpoints"), "the endpoint's backoff")

        dom = chromium(["--dump-dom", admin + "/"])
        page = dom.stdout
        failures = []
        errors = re.search(r'data-js-errors="(\d+)"', page)
        if errors:
            last = re.search(r'data-last-js-error="([^"]*)"', page)
            failures.append(f"{errors.group(1)} script error(s): {html.unescape(last.group(1)) if last else '?'}")
        console = [l for l in dom.stderr.splitlines() if "CONSOLE" in l and
                   ("Uncaught" in l or ":ERROR:" in l or "error" in l.lower())]
        failures += [f"console: {l}" for l in console]
        renders = re.search(r'data-renders="(\d+)"', page)
        if not renders or int(renders.group(1)) < 2:
            failures.append("the page did not render live data twice: " + (renders.group(0) if renders else "no data-renders"))
        counts = re.search(r'<small id="shard-counts">([^<]*)</small>', page)
        if not counts or not re.search(r"\b2 held\b", counts.group(1)):
            failures.append("the shard counts do not show 2 held shards: " + (counts.group(1) if counts else "missing"))
        if "backing off" not in page:
            failures.append("the endpoint is not shown backing off")
        if "http://127.0.0.1:1/invoke" not in page:
            failures.append("the endpoint's URL is missing")
        if "Couldn" not in page:
            failures.append("the endpoint's last error is missing")

        os.makedirs(os.path.join(build, "test-artifacts"), exist_ok=True)
        shot = os.path.join(build, "test-artifacts", "dashboard.png")
        if os.path.exists(shot):
            os.remove(shot)
        chromium(["--screenshot=" + shot, admin + "/"])
        if not os.path.exists(shot) or os.path.getsize(shot) < 10000:
            failures.append("no screenshot was written to " + shot)

        if failures:
            print("dashboard test FAILED:\n  " + "\n  ".join(failures))
            print("server log:\n" + open(os.path.join(work, "server.log")).read()[-2000:])
            return 1
        print(f"dashboard test: loaded, rendered {renders.group(1)} times, {counts.group(1)}; screenshot {shot}")
        return 0
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
