"""The plugin's DaemonSet follows the GPU hosts' container runtime mode: in CDI mode (container_runtime_cdi on every
GPU host) it runs under the nvidia RuntimeClass and hands allocations out as CDI devices; otherwise it is the stock
manifest. From an inventory shaped like inventories/example (card groups with minimum GPU sizes) through the role's
plan to the rendered manifest, without a cluster or any contact."""

import pytest

from helpers import ROOT, example, failed_messages, run_playbook

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "device_plugin_manifest.yml"


def daemonset(tmp_path, **node_vars):
    rc, out, err = run_playbook(PLAYBOOK, inventory=example(tmp_path, gpu_nodes=node_vars), local=False)
    assert rc == 0, (failed_messages(out), err[-2000:])
    task = out["plays"][0]["tasks"][1]
    (result,) = task["hosts"]["master0"]["results"]
    return result["msg"]


def container_env(manifest):
    return {item["name"]: item.get("value") for item in manifest["spec"]["template"]["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("cdi", [True, "true"])   # YAML's boolean, an INI inventory's string
def test_cdi_mode_runs_the_plugin_under_the_runtimeclass_with_cdi_devices(tmp_path, cdi):
    manifest = daemonset(tmp_path, container_runtime_cdi=cdi)
    pod = manifest["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    env = container_env(manifest)
    assert env["DEVICE_LIST_STRATEGY"] == "cdi-cri"
    assert env["NVIDIA_CDI_HOOK_PATH"] == "/usr/bin/nvidia-ctk"
    assert env["NVIDIA_DRIVER_ROOT"] == "/"
    assert {env[name] for name in ("GDRCOPY_ENABLED", "GDS_ENABLED", "MOFED_ENABLED")} == {"false"}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["cdi-root"]["mountPath"] == "/var/run/cdi"
    assert mounts["driver-root"] == {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["cdi-root"]["hostPath"] == {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}
    assert volumes["driver-root"]["hostPath"]["path"] == "/"


def test_cdi_mode_uses_the_nodes_runtime_name(tmp_path):
    manifest = daemonset(tmp_path, container_runtime_cdi=True, container_runtime_runtime_name="nvidia-cdi")
    assert manifest["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia-cdi"


def test_without_cdi_mode_the_manifest_is_the_stock_one(tmp_path):
    manifest = daemonset(tmp_path)
    pod = manifest["spec"]["template"]["spec"]
    assert "runtimeClassName" not in pod
    assert "DEVICE_LIST_STRATEGY" not in container_env(manifest)
    assert not {"cdi-root", "driver-root"} & {v["name"] for v in pod["volumes"]}
