"""README's "On your cluster" on a copy of inventories/example: the preflight passes on a fresh fleet (no GPU facts
yet) and refuses bad settings, both before any host is contacted. The example's private addresses are never used:
each host is pointed at its own closed loopback port (127.0.0.x:9), so any contact shows as UNREACHABLE.

site.yml runs as written - no tags, no limit - so a passing preflight is followed by the first contact (the node
play's fact gathering), which must fail as UNREACHABLE and be the first thing that touches a host."""

import concurrent.futures
import os
import pathlib
import subprocess
import sys
import sysconfig

import pytest

from helpers import ROOT, example, failed_messages, run_playbook

PREFLIGHT_PLAYS = 3


def site(inventory, *extra):
    return run_playbook(ROOT / "playbooks" / "site.yml", *extra, inventory=inventory, local=False)


def unreachable(out):
    return {host: s for host, s in out["stats"].items() if s.get("unreachable")}


def preflight_tasks(out):
    return [task for play in out["plays"][:PREFLIGHT_PLAYS] for task in play["tasks"]]


def test_the_example_inventory_passes_its_preflight_and_fails_only_at_first_contact(tmp_path):
    rc, out, err = site(example(tmp_path))
    assert rc != 0
    plays = [play["play"]["name"] for play in out["plays"]]
    assert [play.split(",")[0] for play in plays[:PREFLIGHT_PLAYS]] == [
        "Preflight - the inventory", "Preflight - every cluster setting", "Preflight - every GPU node's settings"]
    # Both preflight plays passed on every host, and nothing in them reached a host.
    for task in preflight_tasks(out):
        for host, result in task["hosts"].items():
            assert not result.get("failed") and not result.get("unreachable"), (task["task"]["name"], host, result)
    names = [task["task"]["name"].split(" : ")[-1] for task in preflight_tasks(out)]
    for check in ("Check the inventory", "Check the cluster roles' settings", "Check the node roles' settings",
                  "Refuse a Volcano and plugin pair known not to work together"):
        assert check in names, (check, names)
    # Every role was checked: the cluster roles on kube_control, the node roles on each GPU node.
    checked = {(host, result["item"]) for task in preflight_tasks(out) for host, result in task["hosts"].items()
               for result in result.get("results", []) if "item" in result}
    cluster_roles = {"volcano", "device_plugin", "monitoring", "smoke_test"}
    node_roles = {"node_python", "nvidia_driver", "container_runtime", "gpu_verify"}
    assert {role for host, role in checked if host == "master0"} == cluster_roles
    assert {role for host, role in checked if host == "rig02"} == node_roles
    assert "Look for the kubeconfig" not in names  # the cluster plays look for it on kube_control, not the preflight
    # The first contact is the fact gathering of the play that decides which nodes the run disrupts: every GPU node
    # at once, each at its own closed port.
    node_play = out["plays"][PREFLIGHT_PLAYS]
    assert node_play["play"]["name"].startswith("GPU nodes - decide"), node_play["play"]["name"]
    first = next(task for task in node_play["tasks"]
                 if any(result.get("unreachable") for result in task["hosts"].values()))
    assert first["task"]["name"] == "Gather facts", first["task"]["name"]
    assert all(first["hosts"][host].get("unreachable") for host in ("rig01", "rig02")), first["hosts"]
    assert set(unreachable(out)) == {"rig01", "rig02"}, out["stats"]


def test_cdi_mode_passes_the_preflight_with_nvidia_left_non_default(tmp_path):
    """The one switch, as an INI-minded inventory may write it (a string), on every GPU host: the preflight passes
    and the first contact is the nodes' fact gathering."""
    rc, out, err = site(example(tmp_path, gpu_nodes={"container_runtime_cdi": "true"}))
    assert rc != 0
    for task in preflight_tasks(out):
        for host, result in task["hosts"].items():
            assert not result.get("failed") and not result.get("unreachable"), (
                task["task"]["name"], host, result, err[-1500:])
    assert set(unreachable(out)) == {"rig01", "rig02"}, out["stats"]


def test_the_built_collection_runs_by_name_through_its_preflight(tmp_path):
    """As users install it: `make build`'s tarball into an empty collections path, then the playbook by its FQCN,
    from a folder outside the checkout. Its dependencies come from the ansible package (no Galaxy here)."""
    env = dict(os.environ)
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")  # a user's own, not this checkout's
    # Only the empty path and the ansible package's bundled collections - never this checkout's link or .pth.
    env.update(ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="0", ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH="%s:%s" % (tmp_path / "collections", sysconfig.get_paths()["purelib"]))
    bindir = os.path.dirname(sys.executable)
    subprocess.run([os.path.join(bindir, "ansible-galaxy"), "collection", "build", "--force", "--output-path",
                    str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True, env=env, cwd=tmp_path)
    tarball = next((tmp_path / "dist").glob("gpufleet-vgpu-*.tar.gz"))
    subprocess.run([os.path.join(bindir, "ansible-galaxy"), "collection", "install", "-p", str(tmp_path / "collections"),
                    str(tarball)], check=True, capture_output=True, env=env, cwd=tmp_path)
    installed = tmp_path / "collections" / "ansible_collections" / "gpufleet" / "vgpu"
    assert (installed / "playbooks" / "site.yml").is_file()
    assert not (installed / "gpufleet-report").exists() and not (installed / ".venv").exists()
    inventory = example(tmp_path / "site")
    proc = subprocess.run([os.path.join(bindir, "ansible-playbook"), "gpufleet.vgpu.site", "-i", inventory],
                          capture_output=True, text=True, env=dict(env, ANSIBLE_NOCOLOR="1"), cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert str(installed / "playbooks" / "site.yml") in proc.stdout, proc.stdout[-3000:]
    assert "PLAY [Preflight - every GPU node's settings" in proc.stdout, proc.stdout[-3000:]
    # The preflight passed; the first failure is the first contact, the node play's fact gathering.
    before_contact = proc.stdout.split("TASK [Gather facts]")[0]
    assert "fatal:" not in before_contact and "FAILED" not in before_contact, before_contact[-3000:]
    assert "UNREACHABLE" in proc.stdout.split("TASK [Gather facts]")[1], proc.stdout[-3000:]


def test_check_mode_and_the_nodes_tag_pass_the_preflight_too(tmp_path):
    for extra in (["--check", "--diff"], ["--tags", "nodes"]):
        rc, out, err = site(example(tmp_path / extra[0].strip("-")), *extra)
        assert set(unreachable(out)) == {"rig01", "rig02"}, (extra, failed_messages(out), err[-1500:])


# One bad input per kind of check: argument-spec type, choice and element checks, ranges, formats, cross-field
# rules, inventory shape, and the checks that had never run. Each must fail in the preflight, before any host is
# contacted, with a message that names the variable and the value - never Ansible's argument_spec dump.
BAD = [
    # type (argument specs)
    ("type int", {"rtx4090": {"gpu_verify_expected_count": "five"}}, None,
     ["gpu_verify", "gpu_verify_expected_count", "five"]),
    ("type bool", {"gpu_nodes": {"node_python_require_hashes": "perhaps"}}, None,
     ["node_python_require_hashes", "perhaps"]),
    ("type int, container runtime", {"gpu_nodes": {"container_runtime_restart_timeout": "soon"}}, None,
     ["container_runtime_restart_timeout", "soon"]),
    ("type list", {"gpu_nodes": {"nvidia_driver_extra_packages": {"nvidia-fabricmanager": True}}}, None,
     ["nvidia_driver_extra_packages"]),
    ("type bool, cluster role", {"all": {"smoke_test_real_gpus": "sometimes"}}, None,
     ["smoke_test", "smoke_test_real_gpus", "sometimes"]),
    # choice
    ("choice flavor", {"gpu_nodes": {"nvidia_driver_flavor": "nouveau"}}, None,
     ["nvidia_driver_flavor", "nouveau", "open"]),
    ("choice debian source", {"gpu_nodes": {"nvidia_driver_debian_source": "ubuntu"}}, None,
     ["nvidia_driver_debian_source", "ubuntu", "cuda"]),
    ("choice secure boot", {"gpu_nodes": {"nvidia_driver_secure_boot": "sometimes"}}, None,
     ["nvidia_driver_secure_boot", "sometimes"]),
    ("choice plugin mode", {"rtx4070s": {"device_plugin_vgpu": {"mode": "time-slicing"}}}, None,
     ["device_plugin_vgpu of node rig02 (host rig02): mode must be one of hami-core, mig, got 'time-slicing'"]),
    ("choice MIG expectation", {"gpu_nodes": {"gpu_verify_mig_mode": "maybe"}}, None, ["gpu_verify_mig_mode", "maybe"]),
    ("choice default memory", {"all": {"device_plugin_default_memory": "half-card"}}, None,
     ["device_plugin_default_memory", "half-card", "whole-card", "even-share"]),
    # range
    ("range reboot timeout", {"gpu_nodes": {"nvidia_driver_reboot_timeout": 0}}, None,
     ["nvidia_driver_reboot_timeout must be a number of seconds from 1 to 86400, got 0"]),
    ("range drain timeout", {"gpu_nodes": {"nvidia_driver_drain_timeout": -5}}, None,
     ["nvidia_driver_drain_timeout must be a number of seconds from 1 to 86400, got -5"]),
    ("range restart timeout", {"gpu_nodes": {"container_runtime_restart_timeout": 0}}, None,
     ["container_runtime_restart_timeout must be a number of seconds from 1 to 86400, got 0"]),
    ("range split 0", {"rtx4070s": {"device_plugin_vgpu": {"split": 0}}}, None,
     ["device_plugin_vgpu of node rig02 (host rig02): split must be an integer from 1 to 100, got 0"]),
    ("range split 101", {"rtx4090": {"device_plugin_vgpu": {"split": 101}}}, None,
     ["device_plugin_vgpu of node rig01 (host rig01): split must be an integer from 1 to 100, got 101"]),
    # The plural key of the variables before device_plugin_vgpu, in a card group: refused, not ignored.
    ("unknown vGPU key", {"rtx4090": {"device_plugin_vgpu": {"split": 2, "filter_uuids": ["GPU-x"]}}}, None,
     ["device_plugin_vgpu of node rig01 (host rig01): unknown key(s) filter_uuids; allowed: split, core_scaling"]),
    ("range memory", {"rtx4090": {"gpu_verify_min_memory_mib": -1}}, None, ["min_memory_mib", "-1"]),
    # format
    ("driver branch", {"gpu_nodes": {"nvidia_driver_branch": "57"}}, None, ["nvidia_driver_branch", "'57'", "570"]),
    ("driver version", {"gpu_nodes": {"nvidia_driver_version": "570"}}, None, ["nvidia_driver_version", "'570'"]),
    ("toolkit version", {"gpu_nodes": {"container_runtime_toolkit_version": "1.17.8"}}, None,
     ["container_runtime_toolkit_version", "1.17.8-1", "'1.17.8'"]),
    ("python pin", {"gpu_nodes": {"node_python_requirements": ["nvidia-ml-py>=12"]}}, None,
     ["node_python_requirements", "nvidia-ml-py>=12", "name==version"]),
    ("key id instead of fingerprint", {"gpu_nodes": {"container_runtime_repo_key_fingerprints": ["DDCAE044F796ECB0"]}},
     None, ["container_runtime_repo_key_fingerprints", "DDCAE044F796ECB0", "40 hex digits"]),
    ("relative venv path", {"gpu_nodes": {"node_python_venv_path": "opt/gpufleet/venv"}}, None,
     ["node_python_venv_path must be an absolute path, got 'opt/gpufleet/venv'"]),
    ("plugin version without v", {"all": {"device_plugin_version": "1.12.0"}}, None,
     ["device_plugin_version must look like v1.12.0, got '1.12.0'"]),
    ("chart version range", {"all": {"volcano_chart_version": ">=1.15"}}, None,
     ["volcano_chart_version must be an exact chart version", ">=1.15"]),
    ("chart over plain http", {"all": {"volcano_chart_repo_url": "http://charts.example.com/volcano"}}, None,
     ["volcano_chart_repo_url must be https:// or oci://", "http://charts.example.com/volcano"]),
    ("negative memory scaling", {"all": {"device_plugin_device_config": {"deviceMemoryScaling": -1}}}, None,
     ["device_plugin_device_config", "deviceMemoryScaling must be a number > 0", "-1"]),
    ("a device-config key nothing reads", {"all": {"device_plugin_device_config": {"defaultMemory": 8188}}}, None,
     ["device_plugin_device_config", "defaultMemory: 8188 has no effect", "device_plugin_default_memory"]),
    ("alert threshold not a duration", {"all": {"monitoring_alert_for": {"down": "5m", "pending": "15 minutes",
                                                                         "gang": "15m", "gpu_missing": "2m",
                                                                         "gpu_unhealthy": "1m"}}}, None,
     ["monitoring_alert_for.pending", "'15 minutes' is not a Prometheus duration"]),
    ("health timer interval not a time span", {"gpu_nodes": {"gpu_verify_health_interval": "every minute"}}, None,
     ["gpu_verify_health_interval: 'every minute' is not a systemd time span"]),
    ("health timer interval zero", {"gpu_nodes": {"gpu_verify_health_interval": "0s"}}, None,
     ["gpu_verify_health_interval: '0s'", "above zero"]),
    ("textfile directory relative", {"rtx4090": {"gpu_verify_health_textfile_dir": "textfiles"}}, None,
     ["gpu_verify_health_textfile_dir must be an absolute path, got 'textfiles'"]),
    ("choice monitoring operator", {"all": {"monitoring_prometheus_operator": "yes"}}, None,
     ["monitoring_prometheus_operator", "yes", "auto"]),
    ("bad model pattern", {"rtx4090": {"gpu_verify_model_pattern": "RTX (4090"}}, None,
     ["model_pattern is not a valid regular expression", "RTX (4090"]),
    # cross-field
    ("version off its branch", {"gpu_nodes": {"nvidia_driver_branch": "570", "nvidia_driver_version": "565.57.01"}},
     None, ["nvidia_driver_version 565.57.01 is not on nvidia_driver_branch 570"]),
    # AlmaLinux's kmod is one branch in step with the kernel: a pinned branch is refused before any host is contacted.
    ("kmod with a pinned branch", {"gpu_nodes": {"nvidia_driver_modules": "kmod", "nvidia_driver_branch": "570"}},
     None, ["nvidia_driver_branch is set, but nvidia_driver_modules: kmod", "nvidia_driver_modules: dkms"]),
    ("kmod of an unknown kind", {"gpu_nodes": {"nvidia_driver_modules": "akmod"}}, None,
     ["nvidia_driver_modules", "akmod", "dkms", "kmod"]),
    ("reboot a Kubernetes node undrained", {"gpu_nodes": {"nvidia_driver_kube_drain": False}}, None,
     ["nvidia_driver_kube_drain is false on a Kubernetes node", "nvidia_driver_reboot_undrained"]),
    ("drain host not in the inventory", {"gpu_nodes": {"nvidia_driver_kube_host": "master9"}}, None,
     ["nvidia_driver_kube_host is master9, which is not a host of the inventory"]),
    # Accepted by container_runtime alone, but site.yml's plugin finds NVML only through the default runtime.
    ("nvidia not containerd's default", {"gpu_nodes": {"container_runtime_set_as_default": False}}, None,
     ["container_runtime_set_as_default is False for rig01", "register no vGPU",
      "or false together with container_runtime_cdi: true"]),
    # CDI mode: nvidia must stay non-default, on every GPU host or on none, with a spec where containerd looks.
    ("CDI mode with nvidia as the default",
     {"gpu_nodes": {"container_runtime_cdi": True, "container_runtime_set_as_default": True}}, None,
     ["container_runtime_set_as_default is True with container_runtime_cdi: true", "allowed: null (the default) or "
      "false"]),
    ("CDI mode on one card group only", {"rtx4070s": {"container_runtime_cdi": True}}, None,
     ["container_runtime_cdi is true for rig02 but not for rig01", "set it for all of device_plugin_gpu_hosts"]),
    ("CDI spec where containerd does not look",
     {"gpu_nodes": {"container_runtime_cdi": True, "container_runtime_cdi_spec": "/etc/nvidia/cdi.yaml"}}, None,
     ["container_runtime_cdi_spec is '/etc/nvidia/cdi.yaml'", "/etc/cdi, /var/run/cdi, /run/cdi"]),
    ("vGPU with GPU sharing", {"all": {"volcano_deviceshare": {"vgpu_enable": True, "gpu_sharing_enable": True}}}, None,
     ["vgpu_enable and gpu_sharing_enable cannot be combined"]),
    ("unknown scheduler action", {"all": {"volcano_scheduler_actions": "enqueue, allocate, teleport"}}, None,
     ["teleport"]),
    # inventory shape
    # A card group still on the split variable of an earlier release: without the check, split 3 would silently
    # become the fleet's 2.
    ("split count of an earlier release", {"rtx4070s": {"device_plugin_split_count": 3}}, None,
     ["device_plugin_split_count (set for rig02) is no longer read: set device_plugin_vgpu.split instead"]),
    ("host in two card groups", {}, {"rtx4090": {"rig02": {}}},
     ["host rig02 is in groups rtx4070s", "rtx4090", "gpu_verify_min_memory_mib: 16000", "gpu_verify_model_pattern"]),
    ("two names for one machine", {},
     {"rtx4090": {"rig01": {"ansible_host": "127.0.0.99"}}, "rtx4070s": {"rig02": {"ansible_host": "127.0.0.99"}}},
     ["hosts rig01, rig02 all have ansible_host 127.0.0.99 port 9"]),
    ("two kubeconfig holders", {}, {"kube_control": {"master1": {}}},
     ["exactly one host (it holds the kubeconfig) in group kube_control; found 2"]),
    # An inventory written for an earlier release: its per-role kubeconfig would be ignored without a word.
    ("per-role kubeconfig of an earlier release", {"all": {"device_plugin_kubeconfig": "/etc/kubernetes/admin.conf"}},
     None, ["device_plugin_kubeconfig (set for master0, master1, master2, rig01, rig02) is no longer read",
            "gpufleet_kube_auth.kubeconfig"]),
    ("cluster access option kubernetes.core's helm lacks",
     {"all": {"gpufleet_kube_auth": {"kubeconfig": "/root/.kube/config", "client_cert": "/etc/admin.crt"}}}, None,
     ["gpufleet_kube_auth", "client_cert"]),
    ("no card-group expectations, no GPU facts", {"rtx4070s": {"gpu_verify_min_memory_mib": None}}, None,
     ["node rig02 (host rig02): no GPUs known"]),
    # What got through before there was one planner per role:
    # a misspelt variable, which Ansible ignores while the role keeps its default
    ("misspelt variable", {"rtx4070s": {"device_plugin_vgpus": {"split": 3}}}, None,
     ["device_plugin_vgpus (set in group rtx4070s) is no variable of gpufleet's roles - did you mean "
      "device_plugin_vgpu?"]),
    # YAML's own types: a string for a list, a number for a version, a string for a mapping
    ("string for a list", {"all": {"volcano_admission_namespaces": "mljobs"}}, None,
     ["volcano_admission_namespaces must be a YAML list, got the string 'mljobs'"]),
    ("unquoted version", {"all": {"volcano_chart_version": 1.15}}, None,
     ["volcano_chart_version is the number 1.15 in YAML, not a version string"]),
    ("string for a mapping", {"all": {"volcano_deviceshare": "binpack"}}, None,
     ["volcano_deviceshare must be a YAML mapping (key: value), got the string 'binpack'"]),
    # well typed, out of range for what it names
    ("host name that is no node name", {}, {"rtx4090": {"Rig_03": {"ansible_host": "127.0.0.50", "ansible_port": 9}}},
     ["node Rig_03 (host Rig_03) is not a valid Kubernetes node name"]),
    ("device index beyond the cards", {"rtx4090": {"device_plugin_vgpu": {"split": 2, "filter_index": [7]}}}, None,
     ["device_plugin_vgpu of node rig01 (host rig01): filter_index [7] beyond its 5 GPUs"]),
    ("MIG on a GeForce card", {"rtx4090": {"device_plugin_vgpu": {"split": 2, "mode": "mig"}}}, None,
     ["device_plugin_vgpu of node rig01 (host rig01): mode mig, but RTX 4090 has no MIG"]),
    ("unbounded wait", {"all": {"volcano_wait_timeout": 10 ** 6}}, None,
     ["volcano_wait_timeout must be a number of seconds from 1 to 86400, got 1000000"]),
    # the escape hatch that took a whole scheduler configuration past every check
    ("scheduler configuration through the chart values",
     {"all": {"volcano_chart_values": {"custom": {"scheduler_config_override": "actions: allocate"}}}}, None,
     ["volcano_chart_values.custom.scheduler_config_override is set by the volcano role",
      "set volcano_scheduler_actions and volcano_scheduler_tiers instead"]),
]


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    """Every case's run, several at a time (each is a separate ansible-playbook, mostly waiting on its start-up)."""
    def run(entry):
        case, group_vars, hosts = entry[:3]
        return case, site(example(tmp_path_factory.mktemp("bad"), hosts=hosts, **group_vars))
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(run, BAD))


@pytest.mark.parametrize(("case", "group_vars", "hosts", "needles"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_fails_in_the_preflight_without_contact(bad_runs, case, group_vars, hosts, needles):
    rc, out, err = bad_runs[case]
    assert rc != 0
    messages = " ".join(failed_messages(out))
    for needle in needles:
        assert needle in messages, (case, needle, messages, err[-1500:])
    failed = [result for play in out["plays"] for task in play["tasks"] for result in task["hosts"].values()
              if result.get("failed")]
    assert failed and not any("argument_spec_data" in result for result in failed), "argument_spec dump printed"
    assert not unreachable(out), (case, out["stats"])
    assert len(out["plays"]) <= PREFLIGHT_PLAYS, [play["play"]["name"] for play in out["plays"]]
    assert all(s["changed"] == 0 for s in out["stats"].values())


def test_a_misspelt_kube_control_group_stops_the_run_before_any_contact(tmp_path):
    """Without its kube_control group the cluster preflight would match no host and be skipped, and the GPU nodes
    contacted without the cluster checks: the inventory check runs on localhost and names the likely misspelling."""
    inventory = example(tmp_path)
    hosts = pathlib.Path(inventory) / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("kube_control:", "kube-control:", 1))
    rc, out, err = site(inventory)
    assert rc != 0
    messages = " ".join(failed_messages(out))
    assert ("the inventory needs exactly one host (it holds the kubeconfig) in group kube_control; found 0 - the "
            "inventory has group kube-control: a misspelling of kube_control?") in messages, (messages, err[-1500:])
    assert not unreachable(out) and len(out["plays"]) == 1


def test_a_cluster_only_run_contacts_no_gpu_node(tmp_path):
    """site.yml --tags cluster on the example inventory: the first contact is the kube_control host, in the cluster
    play; no GPU node is reached (no fact gathering, no role entered for its argument validation)."""
    rc, out, err = site(example(tmp_path), "--tags", "cluster")
    assert rc != 0
    assert set(unreachable(out)) == {"master0"}, (out["stats"], failed_messages(out), err[-1500:])
    gpu_tasks = [task["task"]["name"] for play in out["plays"] if play["play"]["name"].startswith("GPU nodes")
                 for task in play["tasks"] if any(not r.get("skipped") for r in task["hosts"].values())]
    assert gpu_tasks == [], gpu_tasks
