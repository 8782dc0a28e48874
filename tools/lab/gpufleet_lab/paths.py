"""Where the lab keeps its state and finds its binaries."""

import json
import os
import pathlib
import socket
import time
import zlib

HERE = pathlib.Path(__file__).resolve().parents[1]          # tools/lab
ROOT = HERE.parents[1]                                       # the checkout
CACHE = pathlib.Path(os.environ.get("GPUFLEET_CACHE", "/var/cache/gpufleet"))
LAB = pathlib.Path(os.environ.get("GPUFLEET_LAB_DIR", str(CACHE / "lab")))
BIN = CACHE / "lab-bin"
# Host containers and pod network namespaces are named after the lab directory, so two labs (make site's and the
# tests') never take each other's.
TAG = "%06x" % (zlib.crc32(str(LAB).encode()) & 0xFFFFFF)
# Network namespaces are bind mounts: kept out of $LAB, which is removed as a plain tree.
NETNS = pathlib.Path("/run/gpufleet-lab-%s/netns" % TAG)


def log(msg):
    print("[lab %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def read_json(path):
    try:
        return json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError):
        return {}


def write_json(path, data):
    """Written whole or not at all: readers (tests, the roles' inventory) never see half a file."""
    path = pathlib.Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(path)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
