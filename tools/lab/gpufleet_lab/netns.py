"""Network namespaces of the lab's pods (the pod sandbox) and TCP forwarding into and out of them.

A pod the lab runs gets a network namespace of its own, as behind a pause container: only loopback, so two pods can
listen on the same port (every plugin monitor listens on :9394). Two forwards connect it with this machine:
- into the pod: the API server. The pod's KUBERNETES_SERVICE_HOST/PORT name 127.0.0.1:<apiserver port> inside the
  pod, and a forwarder listening there connects to the API server on this machine's loopback (what kube-proxy does
  for the `kubernetes` Service);
- out of the pod: a container port. A listener on this machine's loopback connects to the port inside the pod (what
  a pod IP is for a scraper).
A listening socket keeps the namespace it was created in, so one thread of the controller enters the pod's namespace
(setns) just to create it.
"""

import ctypes
import os
import pathlib
import socket
import subprocess
import threading

from .paths import log

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def create(path):
    """A new network namespace kept alive by a bind mount on `path`, with loopback up."""
    path = pathlib.Path(path)
    if path.exists() and is_namespace(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    subprocess.run(["unshare", "--net=%s" % path, "true"], check=True)
    subprocess.run(["nsenter", "--net=%s" % path, "ip", "link", "set", "lo", "up"], check=True)
    return path


def is_namespace(path):
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        return any(line.split()[4] == str(path) for line in mounts)


def remove(path):
    path = pathlib.Path(path)
    if path.exists():
        if is_namespace(path):
            subprocess.run(["umount", str(path)], check=False)
        path.unlink(missing_ok=True)


def _in_namespace(path, fn):
    """fn() run by a thread that entered the namespace at `path` (setns changes only the calling thread)."""
    result = {}

    def run():
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(str(path), os.O_RDONLY)
        try:
            if _libc.setns(target, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns %s" % path)
            result["value"] = fn()
        except OSError as exc:
            result["error"] = exc
        finally:
            _libc.setns(own, CLONE_NEWNET)
            os.close(own)
            os.close(target)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def _pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Forward:
    """Listen on 127.0.0.1:`listen_port` in the namespace `listen_ns` (None: this machine's) and connect each
    connection to 127.0.0.1:`target_port` in `target_ns` (None: this machine's)."""

    def __init__(self, listen_ns, listen_port, target_ns, target_port):
        self.target_ns, self.target_port = target_ns, target_port

        def listener():
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", listen_port))
            sock.listen(64)
            return sock
        self.sock = _in_namespace(listen_ns, listener) if listen_ns else listener()
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _connect(self):
        def connect():
            return socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
        sock = _in_namespace(self.target_ns, connect) if self.target_ns else connect()
        sock.settimeout(None)
        return sock

    def _accept(self):
        while not self.closed:
            try:
                conn, dummy = self.sock.accept()
            except OSError:
                return
            try:
                upstream = self._connect()
            except OSError as exc:
                log("controller: forward to port %d failed: %s" % (self.target_port, exc))
                conn.close()
                continue
            threading.Thread(target=_pipe, args=(conn, upstream), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, conn), daemon=True).start()

    def close(self):
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread; close() alone does not
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
