#!/usr/bin/env python3
"""Runs docs/tutorial.md as written: every ```sh block in order, in a scratch directory that
looks like the clone (Makefile and build/ linked in), with the real ports of the tutorial.

A block after `<!-- tutorial: background, ready when HOST:PORT accepts -->` runs in the
background until the end; the next block waits until HOST:PORT accepts connections. A ```json
block after a ```sh block is what the last JSON line that block printed must contain (objects:
these keys with matching values; arrays: as many items, each matching)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from listening import accepts

source, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
PORTS = [7400, 7401, 7402, 7403, 9000]


def contains(got, want, where="$"):
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{where}: expected an object, got {json.dumps(got)}"
        for k, v in want.items():
            if k not in got:
                return f"{where}.{k}: missing in {json.dumps(got)}"
            err = contains(got[k], v, f"{where}.{k}")
            if err:
                return err
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{where}: expected {len(want)} items, got {json.dumps(got)}"
        for i, (g, w) in enumerate(zip(got, want)):
            err = contains(g, w, f"{where}[{i}]")
            if err:
                return err
        return None
    return None if got == want else f"{where}: expected {json.dumps(want)}, got {json.dumps(got)}"


def blocks(text):
    """(kind, body, marker) for every fenced block, kind = the fence's language."""
    out, marker = [], None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"<!-- tutorial: (.*) -->", line.strip())
        if m:
            marker = m.group(1)
        fence = re.match(r"^```(\w+)\s*$", line)
        if fence:
            body = []
            i += 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            out.append((fence.group(1), "\n".join(body) + "\n", marker))
            marker = None
        i += 1
    return out


def main():
    busy = [p for p in PORTS if accepts("127.0.0.1", p)]
    if busy:
        print(f"tutorial: ports {busy} are in use; the tutorial needs 7400-7403 and 9000 free")
        return 1
    work = tempfile.mkdtemp(prefix="fusee-tutorial-")
    os.symlink(os.path.join(source, "Makefile"), os.path.join(work, "Makefile"))
    os.symlink(build, os.path.join(work, "build"))
    # The tutorial's commands dial its own ports, without a token: a developer's FUSEE_SERVER or
    # FUSEE_TOKEN_FILE (say) must not send them elsewhere.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env["BUILD_DIR"] = build
    background, failures, ran = [], 0, 0
    last_output = None
    try:
        steps = blocks(open(os.path.join(source, "docs", "tutorial.md")).read())
        for kind, body, marker in steps:
            if kind == "json" and last_output is not None:
                want = json.loads(body)
                got = None
                for line in reversed(last_output.splitlines()):
                    try:
                        got = json.loads(line)
                        break
                    except ValueError:
                        continue
                err = contains(got, want) if got is not None else "no JSON in the output"
                if err:
                    failures += 1
                    print(f"FAIL expected output: {err}\n--- output ---\n{last_output}")
                else:
                    print(f"ok   output contains {body.strip()}")
                last_output = None
                continue
            if kind != "sh":
                continue
            ran += 1
            if marker and marker.startswith("background"):
                host, port = re.search(r"ready when ([\d.]+):(\d+)", marker).groups()
                log = open(os.path.join(work, f"background-{len(background)}.log"), "w")
                p = subprocess.Popen(["bash", "-c", body], cwd=work, env=env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
                background.append((p, log))
                deadline = time.time() + 600
                while not accepts(host, int(port)):
                    if p.poll() is not None or time.time() > deadline:
                        log.flush()
                        print(f"FAIL background block did not get ready on {host}:{port}:\n{body}")
                        print(open(log.name).read()[-4000:])
                        return 1
                    time.sleep(0.05)
                print(f"ok   started: {body.strip()}")
                continue
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=work, env=env,
                               capture_output=True, text=True, timeout=120)
            last_output = r.stdout
            if r.returncode != 0:
                failures += 1
                print(f"FAIL exit {r.returncode}:\n{body}--- stdout ---\n{r.stdout}"
                      f"--- stderr ---\n{r.stderr}")
            else:
                print(f"ok   ran: {body.strip()}")
    finally:
        for p, log in background:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=10)
            except Exception:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            log.close()
        if failures or os.environ.get("FUSEE_TEST_KEEP"):
            for i, (p, log) in enumerate(background):
                print(f"--- background {i} log (tail) ---")
                print(open(log.name).read()[-3000:])
        shutil.rmtree(work, ignore_errors=True)
    print(f"tutorial: {ran} command blocks, {failures} failed")
    return 1 if failures or ran == 0 else 0


sys.exit(main())
