"""Cluster access is set once: every cluster action of the roles is in the action group gpufleet.vgpu.kubernetes,
whose module_defaults carry gpufleet_kube_auth, and no task passes auth options of its own."""

import importlib.metadata
import pathlib
import re

import pytest
import yaml
from ansible_collections.gpufleet.vgpu.plugins.modules import vgpu_smoke
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _kube_auth, _role_options
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC

ROOT = pathlib.Path(__file__).resolve().parents[4]
RUNTIME = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
GROUP = RUNTIME["action_groups"]["kubernetes"]
AUTH_KEYS = {"kubeconfig", "context", "host", "api_key", "validate_certs", "ca_cert"}
ROLES = ("volcano", "device_plugin", "monitoring", "smoke_test", "nvidia_driver")


def _kubernetes_core_group(name):
    dist = importlib.metadata.distribution("ansible")
    runtime = dist.locate_file("ansible_collections/kubernetes/core/meta/runtime.yml")
    return ["kubernetes.core." + action for action in yaml.safe_load(pathlib.Path(runtime).read_text())
            ["action_groups"][name]]


def group_members():
    members = set()
    for entry in GROUP:
        if isinstance(entry, dict):
            for extended in entry["metadata"]["extend_group"]:
                members.update(_kubernetes_core_group(extended.split(".")[-1]))
        else:
            members.add(entry if "." in entry else "gpufleet.vgpu." + entry)
    return members


def role_tasks():
    """(file, task) for every task of the roles, blocks flattened."""
    def walk(tasks, path):
        for task in tasks or []:
            yield path, task
            for key in ("block", "rescue", "always"):
                yield from walk(task.get(key), path)
    for path in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        yield from walk(yaml.safe_load(path.read_text()), path.relative_to(ROOT))


def cluster_tasks():
    for path, task in role_tasks():
        action = next((key for key in task if key.startswith(("kubernetes.core.", "gpufleet.vgpu.vgpu_smoke"))), None)
        if action:
            yield path, action, task


def test_every_cluster_action_of_the_roles_is_in_the_group():
    members = group_members()
    used = {action for dummy, action, dummy2 in cluster_tasks()}
    assert used, "no cluster task found: the walk is broken"
    assert used <= members, sorted(used - members)


@pytest.mark.parametrize("path, action, task", list(cluster_tasks()), ids=lambda v: str(v)[:40])
def test_no_cluster_task_passes_auth_options_of_its_own(path, action, task):
    assert not AUTH_KEYS & set(task[action] or {}), (str(path), task.get("name"))


@pytest.mark.parametrize("role", ROLES)
def test_each_cluster_role_sets_the_group_defaults_from_gpufleet_kube_auth(role):
    """Each task file with a cluster call is under one module_defaults of the group (its own, or main.yml's)."""
    wanted = {"group/gpufleet.vgpu.kubernetes": "{{ gpufleet_kube_auth | default({}) }}"}
    tasks = ROOT / "roles" / role / "tasks"
    covered = set()
    for path in tasks.glob("*.yml"):
        for task in yaml.safe_load(path.read_text()) or []:
            if task.get("module_defaults") == wanted:
                imports = [t.get("ansible.builtin.import_tasks") for t in task.get("block", [])]
                covered.update({path.name} | {name for name in imports if name})
    with_calls = {path.name for path, dummy, dummy2 in cluster_tasks() if path.parts[1] == role}
    assert with_calls and with_calls <= covered, sorted(with_calls - covered)


def test_gpufleet_kube_auth_is_specified_once():
    """One spec (plugin_utils/_kube_auth.py), in kubernetes.core's spelling and types (those its k8s and helm
    modules both take), checked by role_plan for every role that talks to the cluster; no role repeats it."""
    option = _kube_auth.SPEC[_kube_auth.VARIABLE]
    assert set(option["options"]) == AUTH_KEYS and set(_kube_auth.ROLES) == set(ROLES)
    for key, sub in option["options"].items():
        assert sub["type"] == AUTH_ARG_SPEC[key].get("type", "str") or (key, sub["type"]) == ("kubeconfig", "raw")
    for path in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(path.read_text())["argument_specs"].values():
            assert "gpufleet_kube_auth" not in (entry.get("options") or {}), str(path)
            assert not [name for name in entry.get("options") or {}
                        if re.fullmatch(r"[a-z_]+_(kubeconfig|kube_context)", name)], str(path)


@pytest.mark.parametrize("value, needle", [
    ({"kubeconfig": "/etc/kubernetes/admin.conf", "context": "prod"}, None),
    ({"kubeconfig": "/root/.kube/config", "client_cert": "/etc/admin.crt"}, "gpufleet_kube_auth.client_cert"),
    ({"validate_certs": "perhaps"}, "validate_certs"),
    ("/etc/kubernetes/admin.conf", "gpufleet_kube_auth must be a YAML mapping"),
])
def test_gpufleet_kube_auth_check(value, needle):
    errors = _role_options.check(_kube_auth.SPEC, {_kube_auth.VARIABLE: value})
    if needle is None:
        assert errors == []
    else:
        assert any(needle in e for e in errors), errors


def test_vgpu_smoke_takes_kubernetes_cores_auth_options():
    spec = vgpu_smoke.argument_spec()
    assert set(AUTH_ARG_SPEC) <= set(spec)
    assert {key: spec[key] for key in AUTH_ARG_SPEC} == AUTH_ARG_SPEC
    assert "vgpu_smoke" in GROUP
    # The module's documentation comes from kubernetes.core's fragment, not a copy.
    docs = yaml.safe_load(vgpu_smoke.DOCUMENTATION)
    assert "kubernetes.core.k8s_auth_options" in docs["extends_documentation_fragment"]
    assert not AUTH_KEYS & set(docs["options"])
