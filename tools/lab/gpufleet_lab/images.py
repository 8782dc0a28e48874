"""The container images the lab can run: the files of the image that matter, from binaries built of the pinned
modules. An image the lab does not know is not run (its pod is Running by kwok's account only, as every pod here).

volcano-vgpu-device-plugin (Project-HAMi, docker/Dockerfile.ubuntu20.04 of the pinned version):
    ENTRYPOINT ["volcano-vgpu-device-plugin"], ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=utility;
    /usr/bin/volcano-vgpu-device-plugin (cmd/vgpu), /usr/bin/volcano-vgpu-monitor (cmd/vgpu-monitor),
    /k8s-vgpu/lib/nvidia/ld.so.preload (from the module) and libvgpu.so. libvgpu.so is HAMi-core, built with CUDA
    in the image: the lab has none, so an empty file of that name stands in (nothing in the lab loads it; the
    postStart hook copies it, as it copies the real one).
Only the tag the lab builds runs; another tag of the image is refused with a message, never run with other code.

Volcano's scheduler (volcanosh/vc-scheduler): the tag of the pinned module (tools/lab/volcano/go.mod) runs the
stock build. A lab started with --volcano-fix also runs VOLCANO_FIX_SUFFIX after that tag (v1.15.1-gpufleet-fix) as
the scheduler built with the patches of tools/upstream/volcano, as a site that built that image would deploy it
(volcano_scheduler_image_tag); any other tag is refused. The controller-manager and webhook-manager run the stock
build.
"""

import pathlib
import re
import subprocess

from .paths import BIN, HERE, LAB

PLUGIN_IMAGE = re.compile(r"(^|/)volcano-vgpu-device-plugin:(?P<tag>[^@]+)(@.*)?$")
SCHEDULER_IMAGE = re.compile(r"(^|/)vc-scheduler:(?P<tag>[^@]+)(@.*)?$")
VOLCANO_FIX_SUFFIX = "-gpufleet-fix"


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


def volcano_version():
    """The Volcano version the lab builds (tools/lab/volcano/go.mod)."""
    return _module_version("volcano", "volcano.sh/volcano")


def scheduler_build(image, fix_allowed):
    """(lab-bin group, None) that runs a vc-scheduler image, or (None, why it is refused)."""
    match = SCHEDULER_IMAGE.search(image or "")
    built = volcano_version()
    tag = match.group("tag") if match else None
    if tag == built:
        return "volcano", None
    if tag == built + VOLCANO_FIX_SUFFIX:
        if fix_allowed:
            return "volcano-fix", None
        return None, "%s is the scheduler with tools/upstream/volcano's patches: start the lab with --volcano-fix" % image
    return None, "the lab builds Volcano's scheduler %s only (and %s%s with --volcano-fix); %s is not run" % (
        built, built, VOLCANO_FIX_SUFFIX, image)


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
