#!/usr/bin/env python3
"""Runs docs/operations.md's "All of it on one machine" (under "Securing a node") as written:
the ```sh blocks after `<!-- securing: run -->` markers, in order, in one bash with `set -e`,
with /etc/fusee and /var/lib/fusee moved to a scratch directory and the build's `fusee` first on
PATH. The node uses the default ports (7400-7403): CTest runs this test alone. Checks: every
block succeeds, the workflow completes, the metrics show the three tokens, and no secret
appears in anything printed or logged."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

from listening import accepts

source, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])

busy = [p for p in (7400, 7401, 7402, 7403) if accepts("127.0.0.1", p)]
if busy:
    sys.exit(f"securing_docs: ports {busy} are in use; the recipe needs 7400-7403 free")
text = open(os.path.join(source, "docs", "operations.md")).read()
blocks = re.findall(r"<!-- securing: run -->\s*```sh\n(.*?)```", text, re.S)
if len(blocks) != 3:
    sys.exit(f"expected 3 marked sh blocks in docs/operations.md, found {len(blocks)}")

# CTest ends a test that runs out of time with SIGTERM: leave through `finally`, so the recipe's
# process group (the node holding the default ports) ends with this script.
signal.signal(signal.SIGTERM, lambda *_: sys.exit("securing_docs: stopped by SIGTERM"))
scratch = tempfile.mkdtemp(prefix="fusee-securing-")
proc = None
try:
    script = "\n".join(blocks)
    script = script.replace("/etc/fusee", f"{scratch}/etc/fusee")
    script = script.replace("/var/lib/fusee", f"{scratch}/var/lib/fusee")
    # Background jobs (the node, the worker) end with the script.
    wrapped = ("set -e\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n"
               f"export PATH={build}/app:$PATH\ncd {scratch}\n" + script)
    log = os.path.join(scratch, "out.log")
    with open(log, "w") as out:
        # Its own process group, so the recipe is ended whole (the node and the worker with it)
        # however this script ends; one that hangs is ended under CTest's 300 s, and what it
        # printed is still shown.
        proc = subprocess.Popen(["bash", "-c", wrapped], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            rc = None
    printed = open(log).read()
    failures = []
    if rc is None:
        failures.append("the recipe did not finish within 240 s")
    elif rc != 0:
        failures.append(f"the recipe failed with exit status {rc}")
    if '"status":"completed"' not in printed.replace(" ", ""):
        failures.append("the workflow did not complete")
    if "fusee_auth_tokens 3" not in printed:
        failures.append("the metrics do not show the three tokens")
    for name in ("worker", "client", "read"):
        secret = open(f"{scratch}/etc/fusee/tokens/{name}.token").read().strip()
        if secret in printed:
            failures.append(f"the {name} token was printed")
    if failures:
        print(printed[-6000:])
        for f in failures:
            print("FAIL:", f)
        sys.exit(1)
    print("the recipe ran as written: workflow completed, 3 tokens, no secret printed")
finally:
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    shutil.rmtree(scratch, ignore_errors=True)
