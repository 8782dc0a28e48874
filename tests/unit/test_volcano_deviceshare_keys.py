"""The deviceshare keys the volcano role accepts are exactly those the pinned Volcano reads: derived from its code
(the module tools/lab/volcano pins, as the Go module cache holds it), so a Volcano upgrade that adds or drops a key
fails here until the role follows."""

import json
import pathlib
import re
import subprocess

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _volcano_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
GROUP = ROOT / "tools" / "lab" / "volcano"


def volcano_source():
    """The pinned Volcano module's directory (downloaded through the lab's module proxies when not cached yet)."""
    out = subprocess.run(["bash", "-c", 'source "$1" && cd "$2" && go mod download -json volcano.sh/volcano',
                          "-", str(ROOT / "tools" / "lab" / "goproxy.sh"), str(GROUP)],
                         capture_output=True, text=True, check=True).stdout
    return pathlib.Path(json.loads(out)["Dir"]), json.loads(out)["Version"]


def test_the_role_accepts_every_deviceshare_key_the_pinned_volcano_reads():
    source, version = volcano_source()
    assert version == _volcano_config.KNOWN_VERSION
    read = set()
    for path in sorted((source / "pkg" / "scheduler" / "plugins" / "deviceshare").glob("*.go")):
        if not path.name.endswith("_test.go"):
            read.update(re.findall(r'=\s*"(deviceshare\.\w+)"', path.read_text()))
    assert len(read) >= 10, read
    assert set(_volcano_config.DEVICESHARE_KEYS.values()) == read
