"""The container images the lab can run: the files of the image that matter, from binaries built of the pinned
modules. An image the lab does not know is not run (its pod is Running by kwok's account only, as every pod here).

volcano-vgpu-device-plugin (Project-HAMi, docker/Dockerfile.ubuntu20.04 of the pinned version):
    ENTRYPOINT ["volcano-vgpu-device-plugin"], ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=utility;
    /usr/bin/volcano-vgpu-device-plugin (cmd/vgpu), /usr/bin/volcano-vgpu-monitor (cmd/vgpu-monitor),
    /k8s-vgpu/lib/nvidia/ld.so.preload (from the module) and libvgpu.so. libvgpu.so is HAMi-core, built with CUDA
    in the image: the lab has none, so an empty file of that name stands in (nothing in the lab loads it; the
    postStart hook copies it, as it copies the real one).
Only the tag the lab builds runs; another tag of the image is refused with a message, never run with other code.
"""

import pathlib
import re
import subprocess

from .paths import BIN, HERE, LAB

PLUGIN_IMAGE = re.compile(r"(^|/)volcano-vgpu-device-plugin:(?P<tag>[^@]+)(@.*)?$")


def _module_version(group, module):
    for line in (HERE / group / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["require"] and parts[1:2] == [module]:
            return parts[2]
        if parts[:1] == [module]:
            return parts[1]
    raise LookupError("%s not required in tools/lab/%s/go.mod" % (module, group))


def plugin_version():
    """The plugin version the lab builds (tools/lab/hami/go.mod)."""
    return _module_version("hami", "volcano.sh/k8s-device-plugin")


def _module_dir(group, module):
    return pathlib.Path(subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=HERE / group,
                                       capture_output=True, text=True, check=True).stdout.strip())


def resolve(image):
    """{root, path, env, entrypoint} for an image the lab runs, {"refused": why} for a known image of another tag,
    None for any other image. root: a directory holding the image's files at their paths; path: PATH inside."""
    match = PLUGIN_IMAGE.search(image or "")
    if not match:
        return None
    built = plugin_version()
    if match.group("tag") != built:
        return {"refused": "the lab builds volcano-vgpu-device-plugin %s only (tools/lab/hami/go.mod); %s is not run"
                           % (built, image)}
    root = LAB / "images" / ("volcano-vgpu-device-plugin-%s" % built)
    if not (root / ".complete").exists():
        usr_bin = root / "usr" / "bin"
        usr_bin.mkdir(parents=True, exist_ok=True)
        for name, command in (("volcano-vgpu-device-plugin", "vgpu"), ("volcano-vgpu-monitor", "vgpu-monitor")):
            link = usr_bin / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to((BIN / "hami").resolve() / command)
        lib = root / "k8s-vgpu" / "lib" / "nvidia"
        lib.mkdir(parents=True, exist_ok=True)
        source = _module_dir("hami", "volcano.sh/k8s-device-plugin") / "lib" / "nvidia" / "ld.so.preload"
        (lib / "ld.so.preload").write_bytes(source.read_bytes())
        (lib / "libvgpu.so").write_bytes(b"")
        (root / ".complete").touch()
    path = str(root / "usr" / "bin") + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return {"root": root, "path": path,
            "env": {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"},
            "entrypoint": ["volcano-vgpu-device-plugin"], "mounts": {"/k8s-vgpu": str(root / "k8s-vgpu")}}


def plugin_image(image):
    """Whether an image is the vGPU device plugin's, whatever its tag."""
    return bool(PLUGIN_IMAGE.search(image or ""))
