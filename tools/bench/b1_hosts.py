"""B1: the host layers of site.yml across 1, 4, 8 and 16 podman test hosts, against two baselines on the same hosts
(parallel fact gathering; facts plus one NVML call) and a manual replay; and a rerun where 2 of 8 hosts need a
containerd restart, to show that the disrupted ones still roll one at a time.

Hosts are EL9-like systemd containers (Debian 12 userland with dnf/rpm and AlmaLinux's os-release: the RedHat paths
the article's AlmaLinux 9 servers take, with the stand-in driver packages of the local repositories), prepared once
as the lab's GPU hosts are (tools/lab/hosts.yml: base repositories, containerd, fake NVML) and committed as an image.
"""

import concurrent.futures
import hashlib
import json
import os
import subprocess
import time

import yaml

import common

BASE_IMAGE = "localhost/gpufleet-el9:9"
PREFIX = "gpufleet-bench-b1"
REPO_VOLUME = "%s:/srv/gpufleet-repo:ro" % (common.CACHE / "repos")
# What tells whether a rerun restarted containerd or rewrote its configuration.
PROBE = ("systemctl show containerd -p InvocationID --value; "
         "for f in /etc/containerd/config.toml /etc/containerd/conf.d/*.toml; do "
         "[ -e \"$f\" ] && stat -c '%n %i %Y' \"$f\"; done; true")


def podman(*args, check=True):
    return subprocess.run(["podman"] + list(args), check=check, capture_output=True, text=True)


def image_tag():
    digest = hashlib.sha256()
    for path in ("tools/lab/hosts.yml", "tests/harness/fake_nvml.py", "tests/fixtures/nvml/rig01.json"):
        digest.update((common.ROOT / path).read_bytes())
    digest.update(podman("image", "inspect", "--format", "{{.Id}}", BASE_IMAGE).stdout.encode())
    return "localhost/gpufleet-bench-host:%s" % digest.hexdigest()[:12]


def inventory(work, hosts):
    """Hosts as the lab's GPU nodes (same group vars), each with rig01's five RTX 4090 in its fake NVML."""
    work.mkdir(parents=True, exist_ok=True)
    lab_vars = yaml.safe_load((common.ROOT / "inventories" / "lab" / "group_vars" / "gpu_nodes.yml").read_text())
    lab_vars.pop("ansible_host")
    lab_vars.update(yaml.safe_load((common.ROOT / "inventories" / "lab" / "group_vars" / "rtx4090.yml").read_text()))
    lab_vars["lab_nvml_fixture"] = "rig01"
    # Bare hosts, not nodes of a cluster: kube_control is this machine without a kubeconfig, so no drain or uncordon
    # read (since the role also uncordons in a later run, a known kube host means a Kubernetes node to read).
    lab_vars["nvidia_driver_kube_host"] = ""
    path = work / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {
        "kube_control": {"hosts": {"localhost": {"ansible_connection": "local",
                                                 "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
        "gpu_nodes": {"hosts": {name: {"ansible_host": container} for name, container in hosts.items()},
                      "vars": lab_vars}}}}))
    return path


def ansible(argv, inv, details=None):
    """Run ansible(-playbook); (seconds, rc, recap). ``details``: a dict that gets the run's whole task profile and
    the hosts of each batch of site.yml's node plays."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_CONFIG=str(common.ROOT / "ansible.cfg"))
    started = time.time()
    result = subprocess.run(argv + ["-i", str(inv)], env=env, cwd=str(common.ROOT), capture_output=True, text=True,
                            check=False)
    if details is not None:
        details["profile"] = common.task_profile(result.stdout)
        details["batches"] = {part: common.play_batches(result.stdout, prefix) for part, prefix in NODE_PARTS.items()}
    return time.time() - started, result.returncode, common.recap(result.stdout, result.stderr)


# site.yml's two parts of the node layers (playbooks/site.yml): all at once, and gpufleet_node_serial at a time.
NODE_PARTS = {"steady": "GPU nodes the run does not disrupt", "rolling": "GPU nodes the run disrupts"}
SITE_NODES = ["ansible-playbook", "playbooks/site.yml", "--tags", "nodes"]


def start(names, image):
    for name in names:
        podman("rm", "-f", "-t", "0", name, check=False)
        podman("run", "-d", "--name", name, "--hostname", name.rsplit("-", 1)[-1], "--systemd=always",
               "-v", REPO_VOLUME, image, "/sbin/init")
    # systemd up and containerd (pre-installed in the image) running
    deadline = time.time() + 120
    for name in names:
        while time.time() < deadline:
            state = podman("exec", name, "systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(1)


def remove(names):
    for name in names:
        podman("rm", "-f", "-t", "0", name, check=False)


def prepared_image(work):
    tag = image_tag()
    if podman("image", "exists", tag, check=False).returncode == 0:
        return tag
    name = "%s-prep" % PREFIX
    start([name], BASE_IMAGE)
    try:
        inv = inventory(work / "prep", {"prep": name})
        seconds, rc, recap = ansible(["ansible-playbook", str(common.ROOT / "tools" / "lab" / "hosts.yml")], inv)
        if rc != 0:
            raise RuntimeError("preparing the benchmark host image failed: %s" % recap)
        podman("commit", "-q", name, tag)
        common.log("host image %s prepared in %.0f s" % (tag, seconds))
    finally:
        remove([name])
    return tag


def probe(names):
    return {name: podman("exec", name, "sh", "-c", PROBE, check=False).stdout.split("\n") for name in names}


def differences(before, after):
    """containerd restarts and configuration files rewritten between two probes, summed over hosts."""
    restarts = sum(1 for name in before if before[name][0] != after[name][0])
    rewrites = sum(len(set(after[name][1:]) - set(before[name][1:]) - {""}) for name in before)
    return restarts, rewrites


def manual(names):
    """The article's steps as a shell script on every host at once; seconds until the last host is done."""
    for name in names:
        podman("cp", str(common.ROOT / "tools" / "bench" / "manual-node-steps.sh"), "%s:/root/manual.sh" % name)
        podman("cp", str(common.ROOT / "tools" / "bench" / "nvidia-ctk-replay"), "%s:/usr/local/bin/nvidia-ctk-replay"
               % name)

    def one(name):
        result = podman("exec", "-e", "NVIDIA_CTK=nvidia-ctk-replay", "-e",
                        "KERNEL_RELEASE=5.14.0-503.40.1.el9_5.x86_64", name, "sh", "/root/manual.sh", check=False)
        if result.returncode != 0:
            raise RuntimeError("manual steps failed on %s: %s" % (name, (result.stdout + result.stderr)[-1500:]))

    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(one, names))
    return time.time() - started


def disrupt_containerd(names):
    """containerd's default runtime changed by hand on ``names``: the next run must rewrite the configuration and
    restart containerd there."""
    for name in names:
        podman("exec", name, "sed", "-i", 's/default_runtime_name = "nvidia"/default_runtime_name = "runc"/',
               "/etc/containerd/config.toml")


def rerun(names, inv, extra=()):
    """A rerun of the node layers: its seconds, changes, containerd restarts and rewrites, profile and batches."""
    before = probe(names)
    details = {}
    seconds, rc, recap = ansible(SITE_NODES + list(extra), inv, details)
    if rc != 0:
        raise RuntimeError("site.yml --tags nodes rerun failed on %d hosts: %s" % (len(names), recap))
    restarts, rewrites = differences(before, probe(names))
    return dict({"seconds": round(seconds, 1), "changed": recap.get("changed"), "rc": rc,
                 "containerd_restarts": restarts, "config_rewrites": rewrites}, **details)


def one_size(work, image, count, repeats, every_task_sizes, disrupt):
    """One size on fresh hosts: the first run once, then `repeats` rounds of the baselines and the rerun on the same
    converged hosts (a row each; a rerun leaves them as it found them, changed=0, which each row records), then the
    rerun with every task, the disrupted rerun and the manual replay once. Only the first run needs fresh hosts, and
    on 2 cores it is most of B1's time: converging the hosts again for each repeat would triple B1 for figures that
    are not the goal's."""
    names = ["%s-h%02d" % (PREFIX, i + 1) for i in range(count)]
    hosts = {"h%02d" % (i + 1): name for i, name in enumerate(names)}
    inv = inventory(work / ("n%d" % count), hosts)
    start(names, image)
    rows = []
    try:
        # Fresh hosts, all at once: the rollout pacing matters on a fleet in service, not on the benchmark's.
        first_s, rc, recap = ansible(SITE_NODES + ["-e", "gpufleet_node_serial=100%"], inv)
        if rc != 0:
            raise RuntimeError("site.yml --tags nodes failed on %d hosts: %s" % (count, recap))
        for repeat in range(repeats):
            row = {"hosts": count, "repeat": repeat}
            if repeat == 0:
                row["first_s"], row["first_changed"] = round(first_s, 1), recap["changed"]
            # The baselines, as a rerun gathers facts: with the local fact the node roles left.
            setup_s, rc, _recap = ansible(["ansible", "gpu_nodes", "-m", "ansible.builtin.setup"], inv)
            row["facts_s"] = round(setup_s, 1)
            nvml_s, rc, nvml_recap = ansible(
                ["ansible-playbook", str(common.ROOT / "tools" / "bench" / "b1-baseline.yml")], inv)
            if rc != 0:
                raise RuntimeError("the facts + NVML baseline failed on %d hosts: %s" % (count, nvml_recap))
            row["facts_nvml_s"] = round(nvml_s, 1)
            row["rerun_fast"] = rerun(names, inv)
            if repeat == repeats - 1:
                if count in every_task_sizes:
                    row["rerun_every_task"] = rerun(names, inv, ["-e", EVERY_TASK])
                if count == disrupt["hosts"]:
                    disrupt_containerd(names[:disrupt["disrupted"]])
                    row["rerun_disrupt"] = dict(rerun(names, inv), hosts=count, disrupted=disrupt["disrupted"])
            for key in ("rerun_fast", "rerun_every_task", "rerun_disrupt"):
                if key in row:
                    row[key]["ratio_to_facts"] = round(row[key]["seconds"] / setup_s, 2)
                    row[key]["ratio_to_facts_nvml"] = round(row[key]["seconds"] / nvml_s, 2)
            ping_s, rc, _recap = ansible(["ansible", "gpu_nodes", "-m", "ansible.builtin.ping"], inv)
            row["one_task_s"] = round(ping_s, 1)
            common.log("B1 %d hosts, repeat %d: %s" % (count, repeat, json.dumps(
                {k: v for k, v in row.items() if not isinstance(v, dict)})))
            rows.append(row)
    finally:
        remove(names)
    # The manual replay on fresh hosts of the same image: first run, then the rerun an operator does.
    start(names, image)
    try:
        first = manual(names)
        before = probe(names)
        again = manual(names)
        restarts, rewrites = differences(before, probe(names))
        rows[0]["manual"] = {"first_s": round(first, 1), "rerun_s": round(again, 1), "containerd_restarts": restarts,
                             "config_rewrites": rewrites}
        common.log("B1 manual %d hosts: %s" % (count, rows[0]["manual"]))
    finally:
        remove(names)
    return rows


# Every node role's fast path off: each task runs, as before the fast path (docs/fast-path.md). Every node then
# counts as disrupted (its roles will run all their tasks), so this rerun goes one node at a time.
EVERY_TASK = json.dumps({"node_python_fast_path": False, "nvidia_driver_fast_path": False,
                         "container_runtime_fast_path": False})


def settings():
    """What shapes the figures besides the code: Ansible's own settings of the repository's ansible.cfg."""
    import configparser  # pylint: disable=import-outside-toplevel
    config = configparser.ConfigParser(interpolation=None)
    config.read(common.ROOT / "ansible.cfg")
    return {"ansible_cfg": {section: dict(config[section]) for section in config.sections()},
            "serial": "gpufleet_node_serial default (1 node at a time) for reruns; 100% for the first run",
            "connection": "containers.podman.podman"}


def run(out_dir, sizes=(1, 4, 8, 16), repeats=3, every_task_sizes=(1,), disrupt=(8, 2)):
    """Each size on fresh hosts of the prepared image, its reruns and baselines `repeats` times: the report takes
    medians.
    ``every_task_sizes``: where the rerun with the fast path off is timed too (it rolls one node at a time);
    ``disrupt``: (hosts, disrupted) - at that size, one more rerun after containerd drifted on that many hosts."""
    work = out_dir / "b1-work"
    image = prepared_image(work)
    disrupt = {"hosts": disrupt[0], "disrupted": disrupt[1]}
    rows = [row for count in sizes for row in one_size(work, image, count, repeats, set(every_task_sizes), disrupt)]
    return common.write_result(out_dir, "b1-hosts", {"image": image, "repeats": repeats, "runs": rows,
                                                     "fresh_hosts_per_size": 1,
                                                     "facts_after_first_run": True, "every_task_sizes":
                                                     sorted(every_task_sizes), "disrupt": disrupt,
                                                     "settings": settings()})
