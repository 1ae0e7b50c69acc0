#!/usr/bin/env python3
"""Checks our signatures against Python's hmac module, in both directions (PROTOCOL.md §8)."""
import hashlib
import hmac
import subprocess
import sys

SIGTOOL = sys.argv[1]
T0 = 1764489600000
TOL = 5 * 60 * 1000
failures = 0
checks = 0


def py_sign(secret: bytes, t: int, body: bytes) -> str:
    mac = hmac.new(secret, str(t).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def py_verify(secret: bytes, header: str, body: bytes, now: int) -> bool:
    parts = dict(p.split("=", 1) for p in header.split(","))
    t = int(parts["t"])
    if abs(now - t) > TOL:
        return False
    want = hmac.new(secret, parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, parts["v1"])


def ours_sign(secret: bytes, t: int, body: bytes) -> str:
    out = subprocess.run([SIGTOOL, "sign", secret.hex(), str(t)], input=body,
                         capture_output=True, check=True)
    return out.stdout.decode()


def ours_verify(secret: bytes, header: str, body: bytes, now: int):
    out = subprocess.run([SIGTOOL, "verify", secret.hex(), str(now), header], input=body,
                         capture_output=True)
    return out.returncode, out.stdout.decode().split(":")[0]


def check(name, cond):
    global failures, checks
    checks += 1
    print(("ok   " if cond else "FAIL ") + name)
    if not cond:
        failures += 1


cases = [
    (b"s3cret", b'{"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3,9]}'),
    (bytes(range(256)), b""),
    (b"k" * 200, "unicode \u00e9\u4e2d body".encode()),
]
for secret, body in cases:
    ours = ours_sign(secret, T0, body)
    check(f"python verifies ours ({len(secret)}-byte secret)", py_verify(secret, ours, body, T0))
    check("python and ours produce the same header", ours == py_sign(secret, T0, body))
    theirs = py_sign(secret, T0, body)
    check("ours verifies python's", ours_verify(secret, theirs, body, T0) == (0, ""))
    check("ours refuses python's header for another body",
          ours_verify(secret, theirs, body + b"x", T0) == (1, "mismatch"))
    check("ours refuses an expired header",
          ours_verify(secret, theirs, body, T0 + TOL + 1) == (1, "too_old"))
    check("ours refuses a header from the future",
          ours_verify(secret, theirs, body, T0 - TOL - 1) == (1, "too_new"))
    check("ours refuses a malformed header",
          ours_verify(secret, theirs.replace("v1=", "v1=zz"), body, T0) == (1, "malformed"))

passed = checks - failures
print(f"{passed} passed, {failures} failed")
sys.exit(1 if failures else 0)
