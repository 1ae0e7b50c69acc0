"""Whether something accepts TCP connections at host:port: the docs tests' check that the fixed
ports they need are free, and the tutorial's wait for a background block to be ready."""
import socket


def accepts(host, port):
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False
