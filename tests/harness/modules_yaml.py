"""Write modules.yaml (modulemd v2) for the stand-in CUDA repository: module nvidia-driver with one stream per
flavor/branch, as NVIDIA's rhel9 repository has them. Used by build-repos.sh; prints to stdout."""

import pathlib
import sys

repo = pathlib.Path(sys.argv[1])
streams = {
    "open-dkms": ("570.133.20", "kmod-nvidia-open-dkms"),
    "latest-dkms": ("570.133.20", "kmod-nvidia-latest-dkms"),
    "570-open": ("570.133.20", "kmod-nvidia-open-dkms"),
    "570-dkms": ("570.133.20", "kmod-nvidia-latest-dkms"),
    "565-open": ("565.57.01", "kmod-nvidia-open-dkms"),
    "565-dkms": ("565.57.01", "kmod-nvidia-latest-dkms"),
}
docs = []
for i, (stream, (version, kmod)) in enumerate(sorted(streams.items())):
    rpms = [kmod, "nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced"]
    artifacts = "\n".join("      - %s-0:%s-1.el9.x86_64" % (name, version) for name in rpms)
    pkgs = "\n".join("        - %s" % name for name in rpms)
    docs.append(
        "---\ndocument: modulemd\nversion: 2\ndata:\n  name: nvidia-driver\n  stream: \"%s\"\n"
        "  version: %d\n  context: 8b7a6f1b\n  arch: x86_64\n  summary: NVIDIA driver (gpufleet test stand-in)\n"
        "  description: Stand-in for NVIDIA's nvidia-driver module.\n  license:\n    module: [MIT]\n"
        "  dependencies:\n  - buildrequires:\n      platform: [el9]\n    requires:\n      platform: [el9]\n"
        "  profiles:\n    default:\n      rpms:\n%s\n  api:\n    rpms:\n%s\n  artifacts:\n    rpms:\n%s\n...\n"
        % (stream, 9060020250101 + i, pkgs, pkgs, artifacts)
    )
sys.stdout.write("".join(docs))
