# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One planner per role: every check of a role's settings that its argument spec cannot state, and what the role
then renders (controller only, no Ansible objects).

``plan(role, options, context)`` returns ``{"errors": [...], ...}``: one message per failed rule, each naming the
variable, the value and what is allowed; and, when there is none, the role's plan. ``options`` are the role's
option values as the role sees them (inventory over defaults, templated); ``context`` what a role reads beyond its
own options: the GPU hosts' variables (``hosts``: _gpu_hosts.read()), the inventory's host names, and for the
device_plugin role inside a run the cluster's Nodes and device ConfigMap. Action gpufleet.vgpu.role_plan calls it,
both from the preflight (before any host is contacted) and at the start of the role.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _contract
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _gpu_policy
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _openpgp
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _admission
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _gpu_hosts
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _monitoring
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _nvidia_driver
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _vgpu_plugin
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _volcano_config

# A wait, in seconds: at least one, at most a day (a longer one is a typo, and would hold a run for days).
WAIT_RANGE = (1, 86400)
# Exact pins only (>=, ~= or a bare name let the index pick the version).
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[^ ;*]+$")
SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")
TOOLKIT_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*-[0-9A-Za-z.~+]+$")
CHART_VERSION = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$")
PLAIN_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# systemd.time(7): numbers with units (a bare number is seconds), above zero.
TIMESPAN = re.compile(r"^(?=[^1-9]*[1-9])\s*(\d+(\.\d+)?\s*(usec|us|msec|ms|seconds|second|sec|s|minutes|minute|min|m|"
                      r"hours|hour|hr|h|days|day|d|weeks|week|w|months|month|M|years|year|y)?\s*)+$")


# Kubernetes' label syntax (apimachinery's IsQualifiedName and IsValidLabelValue): an optional DNS subdomain
# prefix and "/", then a name of at most 63 characters; a value is a string of at most 63 such characters, or empty.
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _label_errors(variable, labels):
    """A mapping of node labels (a nodeSelector, or labels to put on nodes) the API server would refuse, named
    before the run instead of as a failed API call (an unquoted YAML true is a boolean, which no label value is)."""
    if not isinstance(labels, dict):
        return ["%s must be a mapping of label names to values, got %r" % (variable, labels)]
    errors = []
    for key, value in labels.items():
        prefix, dummy, name = str(key).rpartition("/")
        if not isinstance(key, str) or not LABEL_NAME.match(name) or (
                "/" in key and not (len(prefix) <= 253 and LABEL_PREFIX.match(prefix))):
            errors.append("%s: %r is not a label name (an optional DNS prefix and '/', then at most 63 letters, "
                          "digits, '-', '_' or '.', starting and ending alphanumeric)" % (variable, key))
        if not isinstance(value, str):
            written = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
            errors.append("%s: the value of %s must be a string, got %r: quote it (%s: \"%s\")"
                          % (variable, key, value, key, written))
        elif value and not LABEL_NAME.match(value):
            errors.append("%s: the value %r of %s is not a label value (empty, or at most 63 letters, digits, '-', "
                          "'_' or '.', starting and ending alphanumeric)" % (variable, value, key))
    return errors


def _waits(options, names):
    errors = []
    for name in names:
        value = options.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not WAIT_RANGE[0] <= value <= WAIT_RANGE[1]:
            errors.append("%s must be a number of seconds from %d to %d, got %r"
                          % (name, WAIT_RANGE[0], WAIT_RANGE[1], value))
    return errors


def _absolute(options, names, empty_ok=()):
    errors = []
    for name in names:
        value = options.get(name)
        if name in empty_ok and value in ("", None):
            continue
        if not isinstance(value, str) or not value.startswith("/"):
            errors.append("%s must be an absolute path%s, got %r"
                          % (name, " (or empty)" if name in empty_ok else "", value))
    return errors


def _fingerprints(name, values, example, required=True):
    bad = [value for value in values or [] if not _openpgp.valid_fingerprint(value)]
    if required and not values:
        return ["%s must list the repository's key fingerprints, got none" % name]
    if bad:
        return ["%s must list full key fingerprints (40 hex digits, or 64 for v6 keys; gpg prints them with spaces, "
                "which are fine); %s %s not (key IDs such as %s are not enough to pin a key)"
                % (name, ", ".join(repr(v) for v in bad), "is" if len(bad) == 1 else "are", example)]
    return []


# ---------------------------------------------------------------- node roles

def node_python(options, context):
    errors = _absolute(options, ("node_python_venv_path", "node_python_wheelhouse", "node_python_system_python"),
                       empty_ok=("node_python_wheelhouse", "node_python_system_python"))
    requirements = options.get("node_python_requirements") or []
    loose = [r for r in requirements if not isinstance(r, str) or not PIN.match(r)]
    if not requirements:
        errors.append("node_python_requirements must list the packages to install as exact 'name==version' pins, "
                      "got none")
    elif loose:
        errors.append("node_python_requirements must be exact 'name==version' pins (>=, <=, ~= and wildcards are not "
                      "pins); not pins: %s" % ", ".join(repr(r) for r in loose))
    if options.get("node_python_require_hashes") and requirements and not loose:
        hashes = {_normal(name): value for name, value in (options.get("node_python_requirement_hashes") or {}).items()}
        names = [_normal(r.split("==", 1)[0].split("[", 1)[0]) for r in requirements]
        missing = [n for n in names if not hashes.get(n)]
        malformed = sorted({str(h) for v in hashes.values() for h in (v if isinstance(v, list) else [v])
                            if not SHA256.match(str(h))})
        if missing:
            errors.append("node_python_requirement_hashes has no hashes for %s: give each requirement its archives' "
                          "hashes as 'sha256:<64 hex digits>' (pip download NAME==VERSION, then sha256sum; or the "
                          "hashes PyPI lists), or set node_python_require_hashes: false for a wheelhouse you built "
                          "and trust" % ", ".join(missing))
        if malformed:
            errors.append("node_python_requirement_hashes: %s %s not 'sha256:<64 hex digits>'"
                          % (", ".join(repr(h) for h in malformed), "is" if len(malformed) == 1 else "are"))
    return {"errors": errors}


def _normal(name):
    """A requirement name as pip compares them (PEP 503): nvidia_ml_py and NVIDIA-ML-Py are nvidia-ml-py."""
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def nvidia_driver(options, context):
    driver = _nvidia_driver.plan({"flavor": options.get("nvidia_driver_flavor"),
                                  "branch": options.get("nvidia_driver_branch"),
                                  "version": options.get("nvidia_driver_version"),
                                  "stream": options.get("nvidia_driver_module_stream"),
                                  "debian_source": options.get("nvidia_driver_debian_source"),
                                  # Known where the check runs on a host after fact gathering (the role's own check).
                                  "modules": options.get("nvidia_driver_modules"),
                                  "os_family": (context.get("os") or {}).get("family"),
                                  "os_major": (context.get("os") or {}).get("major"),
                                  "distribution": (context.get("os") or {}).get("distribution")})
    errors = list(driver["errors"])
    errors += _waits(options, ("nvidia_driver_reboot_timeout", "nvidia_driver_drain_timeout"))
    kube_host = options.get("nvidia_driver_kube_host") or ""
    if kube_host and kube_host not in (context.get("inventory_hosts") or ()):
        errors.append("nvidia_driver_kube_host is %s, which is not a host of the inventory (it runs the drain with "
                      "the kubeconfig)" % kube_host)
    if (kube_host and not options.get("nvidia_driver_kube_drain") and options.get("nvidia_driver_reboot")
            and not options.get("nvidia_driver_reboot_undrained")):
        errors.append("nvidia_driver_kube_drain is false on a Kubernetes node (nvidia_driver_kube_host: %s) while "
                      "nvidia_driver_reboot is true: a reboot would kill its pods without notice. Turn the drain on, "
                      "set nvidia_driver_reboot: false (reboots reported as pending), or opt in with "
                      "nvidia_driver_reboot_undrained: true" % kube_host)
    # Only for NVIDIA's CUDA repository (the role's default key pin; empty where the distribution's driver is used).
    errors += _fingerprints("nvidia_driver_cuda_repo_key_fingerprints",
                            options.get("nvidia_driver_cuda_repo_key_fingerprints"), "A4B469963BF863CC",
                            required=False)
    host_os = context.get("os") or {}
    if (_nvidia_driver.el_major(host_os.get("family"), host_os.get("major")) >= 10
            and options.get("nvidia_driver_modules", "dkms") == "dkms"
            and not options.get("nvidia_driver_cuda_repo_key_fingerprints")):
        errors.append("nvidia_driver_cuda_repo_key_fingerprints is empty, and gpufleet pins no fingerprint for "
                      "NVIDIA's EL%s repository key (CDF6BA43.pub, another key than EL9's): check that key out of "
                      "band (gpg --show-keys CDF6BA43.pub, against NVIDIA's published fingerprint) and set its "
                      "40-hex-digit fingerprint as a list" % host_os.get("major"))
    return {"errors": errors}


def container_runtime(options, context):
    errors = []
    version = options.get("container_runtime_toolkit_version")
    if not isinstance(version, str) or not TOOLKIT_VERSION.match(version):
        errors.append("container_runtime_toolkit_version must be a package version-release such as 1.17.8-1, got %r"
                      % (version,))
    if not options.get("container_runtime_toolkit_packages"):
        errors.append("container_runtime_toolkit_packages must name the toolkit's packages, got none")
    errors += _waits(options, ("container_runtime_restart_timeout",))
    errors += _absolute(options, ("container_runtime_containerd_config", "container_runtime_runtime_binary"))
    name = options.get("container_runtime_runtime_name")
    if not isinstance(name, str) or not PLAIN_NAME.match(name):
        errors.append("container_runtime_runtime_name must be a plain name (letters, digits, _ . -), got %r" % (name,))
    if options.get("container_runtime_manage_repo"):
        errors += _fingerprints("container_runtime_repo_key_fingerprints",
                                options.get("container_runtime_repo_key_fingerprints"), "DDCAE044F796ECB0")
    return {"errors": errors + _cdi_mode(options)}


# The folders containerd scans for CDI specs by default (cdi_spec_dirs); /run is /var/run.
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi", "/run/cdi")


def _cdi_mode(options):
    """CDI mode's own rules: nvidia non-default, containerd reading CDI specs, a spec file containerd finds."""
    if not options.get("container_runtime_cdi"):
        return []
    errors = []
    if options.get("container_runtime_set_as_default") is True:
        errors.append("container_runtime_set_as_default is True with container_runtime_cdi: true: in CDI mode the "
                      "nvidia runtime must not be containerd's default (every container would see the GPUs); "
                      "allowed: null (the default) or false")
    if options.get("container_runtime_enable_cdi") is False:
        errors.append("container_runtime_enable_cdi is False with container_runtime_cdi: true: CDI mode needs "
                      "containerd to read CDI specs; allowed: null (the default) or true")
    spec = options.get("container_runtime_cdi_spec")
    folder, dummy, name = (spec or "").rpartition("/")
    if folder.rstrip("/") not in CDI_SPEC_DIRS or not name.endswith((".yaml", ".json")) or name in (".yaml", ".json"):
        errors.append("container_runtime_cdi_spec is %r: it must be a .yaml or .json file directly in %s, the "
                      "folders containerd scans" % (spec, ", ".join(CDI_SPEC_DIRS)))
    return errors


def gpu_verify(options, context):
    mode = options.get("gpu_verify_mig_mode")
    if mode == "auto":
        # The MIG mode the host's vGPU settings ask for: on for the plugin's mig mode, off otherwise.
        mode = "on" if _gpu_hosts.vgpu_mode(context.get("host_vars") or {}) == "mig" else "off"
    expect = {"expected_count": options.get("gpu_verify_expected_count"),
              "model_pattern": options.get("gpu_verify_model_pattern"),
              "min_driver": options.get("gpu_verify_min_driver"),
              "driver_branch": str(options.get("gpu_verify_driver_branch") or ""), "mig_mode": mode,
              "min_memory_mib": options.get("gpu_verify_min_memory_mib") or 0}
    for flag in ("fail_on_retired_pages_pending", "fail_on_remapped_rows", "fail_on_uncorrected_ecc",
                 "warn_on_pcie_degraded", "warn_on_persistence_off"):
        expect[flag] = bool(options.get("gpu_verify_" + flag))
    errors = ["gpu_verify_" + problem for problem in _gpu_policy.validate_expect(expect)]
    source = options.get("gpu_verify_xid_source")
    if source not in ("auto", "kmsg", "journal") and not (isinstance(source, str) and source.startswith("/")):
        errors.append("gpu_verify_xid_source: %r is none of auto, kmsg, journal or an absolute path of a kernel log "
                      "file" % (source,))
    if options.get("gpu_verify_health_timer"):
        interval = options.get("gpu_verify_health_interval")
        if not isinstance(interval, str) or not TIMESPAN.match(interval):
            errors.append("gpu_verify_health_interval: %r is not a systemd time span above zero (such as 30s, 1min, "
                          "5min)" % (interval,))
        errors += _absolute(options, ("gpu_verify_health_textfile_dir", "gpu_verify_health_dir"))
        if not options.get("gpu_verify_health_node_name"):
            errors.append("gpu_verify_health_node_name is empty: the health check's series need the node's name")
    return {"errors": errors, "expect": expect}


# ---------------------------------------------------------------- cluster roles

def volcano(options, context):
    planned = _volcano_config.plan({
        "actions": options.get("volcano_scheduler_actions"), "tiers": options.get("volcano_scheduler_tiers"),
        "deviceshare": options.get("volcano_deviceshare"), "binpack": options.get("volcano_binpack"),
        "custom_plugins": options.get("volcano_scheduler_custom_plugins"),
        "configurations": options.get("volcano_scheduler_configurations"),
        "admission_namespaces": options.get("volcano_admission_namespaces"),
        "enabled_admissions": options.get("volcano_enabled_admissions"),
        "scheduler_name": options.get("volcano_scheduler_name")})
    errors = list(planned["errors"])
    ref, repo, version = (options.get("volcano_chart_ref") or "", options.get("volcano_chart_repo_url") or "",
                          options.get("volcano_chart_version"))
    if not ref:
        errors.append("volcano_chart_ref must name the chart (or a local chart directory or .tgz), got %r" % (ref,))
    if repo and not version:
        errors.append("a chart from a repository (volcano_chart_repo_url %s) needs a pinned volcano_chart_version"
                      % repo)
    elif repo and not CHART_VERSION.match(str(version)):
        errors.append("volcano_chart_version must be an exact chart version such as 1.15.1, got %r; ranges and "
                      "\"latest\" are no pin" % (version,))
    if repo and not re.match(r"^(https|oci)://", repo):
        errors.append("volcano_chart_repo_url must be https:// or oci://, got %s; for a mirror without TLS, download "
                      "the chart and set volcano_chart_ref to the local .tgz and volcano_chart_repo_url to \"\""
                      % repo)
    nameless = [index for index, queue in enumerate(options.get("volcano_queues") or [])
                if not isinstance(queue, dict) or not queue.get("name")]
    if nameless:
        errors.append("volcano_queues: entries %s have no name" % ", ".join(map(str, nameless)))
    errors += _waits(options, ("volcano_wait_timeout",))
    errors += _label_errors("volcano_node_selector", options.get("volcano_node_selector") or {})
    threads = options.get("volcano_scheduler_node_worker_threads")
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 100:
        errors.append("volcano_scheduler_node_worker_threads must be an integer from 1 to 100, got %r" % (threads,))
    percentage = options.get("volcano_scheduler_percentage_nodes_to_find", 0)
    if isinstance(percentage, bool) or not isinstance(percentage, int) or not 0 <= percentage <= 100:
        errors.append("volcano_scheduler_percentage_nodes_to_find must be an integer from 0 (Volcano's adaptive share) "
                      "to 100, got %r" % (percentage,))
    errors += chart_values_errors(options.get("volcano_chart_values") or {})
    # The scheduler's image tag: what runs deviceshare, and what the version check pairs with the plugin's.
    tag_variable = "volcano_scheduler_image_tag" if options.get("volcano_scheduler_image_tag") else "volcano_image_tag"
    return dict(planned, errors=errors, scheduler_tag=options.get(tag_variable), scheduler_tag_variable=tag_variable)


# Chart values the volcano role sets from its own variables: set through volcano_chart_values they would bypass
# every check above, and the scheduler's roll on a configuration change.
OWNED_CHART_VALUES = {
    ("basic", "image_registry"): "volcano_image_registry",
    ("basic", "image_tag_version"): "volcano_image_tag",
    ("basic", "scheduler_image_tag_version"): "volcano_scheduler_image_tag",
    ("basic", "image_pull_policy"): "volcano_image_pull_policy",
    ("custom", "scheduler_config_override"): "volcano_scheduler_actions and volcano_scheduler_tiers",
    ("custom", "admission_config_override"): "volcano_admission_namespaces",
    ("custom", "enabled_admissions"): "volcano_enabled_admissions",
    ("custom", "scheduler_podLabels"): "nothing: the role labels the scheduler's pods to roll them",
    ("custom", "scheduler_node_worker_threads"): "volcano_scheduler_node_worker_threads",
    ("custom", "scheduler_log_level"): "volcano_scheduler_log_level",
    ("custom", "scheduler_percentage_nodes_to_find"): "volcano_scheduler_percentage_nodes_to_find",
    ("custom", "default_ns"): "volcano_node_selector",
    ("custom", "default_tolerations"): "volcano_tolerations",
    ("custom", "default_affinity"): "volcano_affinity",
}


def chart_values_errors(values):
    if not isinstance(values, dict):
        return ["volcano_chart_values must be a mapping of chart values, got %r" % (values,)]
    errors = []
    for (section, key), instead in sorted(OWNED_CHART_VALUES.items()):
        if isinstance(values.get(section), dict) and key in values[section]:
            errors.append("volcano_chart_values.%s.%s is set by the volcano role (checked, and the scheduler rolled "
                          "on a change); set %s instead" % (section, key, instead))
    return errors


def device_plugin(options, context):
    hosts = context.get("hosts") or []
    errors = []
    if not options.get("device_plugin_gpu_hosts"):
        errors.append("device_plugin_gpu_hosts is empty: name the inventory hosts with GPUs (default: group "
                      "gpu_nodes)")
    for host in hosts:
        if not _contract.valid_node_name(host["node"]):
            errors.append("node %s (host %s) is not a valid Kubernetes node name (lowercase letters, digits, '-' and "
                          "'.', at most 253): set device_plugin_node_name for that host to the node's name"
                          % (host["node"], host["host"]))
    sized = _gpu_hosts.sized(hosts, context.get("nodes"), context.get("registered_factor"))
    node_label = options.get("device_plugin_node_label")
    base = (context.get("defaults") or {}).get("device_plugin_vgpu")
    planned = _vgpu_plugin.plan({"vgpu": options.get("device_plugin_vgpu"), "vgpu_defaults": base,
                                 "memory_factor": options.get("device_plugin_gpu_memory_factor"),
                                 "device_config": options.get("device_plugin_device_config"),
                                 "version": options.get("device_plugin_version"),
                                 # A label that is no mapping is refused below (_label_errors), not planned.
                                 "node_label": node_label if isinstance(node_label, dict) else None}, sized)
    errors += planned["errors"]
    runtime = context.get("runtime") or {"cdi": False, "runtime": "nvidia", "error": None}
    if runtime.get("error"):
        errors.append(runtime["error"])
    version = _vgpu_plugin.image_version("x:%s" % (options.get("device_plugin_version") or ""))
    if runtime["cdi"] and version is not None and version < _vgpu_plugin.CDI_VERSION:
        errors.append("device_plugin_version %s has no CDI variant, which the GPU hosts' container_runtime_cdi: true "
                      "needs: allowed v%s or newer" % (options.get("device_plugin_version"),
                                                       ".".join(str(part) for part in _vgpu_plugin.CDI_VERSION)))
    errors += _waits(options, ("device_plugin_wait_timeout", "device_plugin_kubelet_status_period"))
    errors += _label_errors("device_plugin_node_label", node_label or {})
    errors += _vgpu_plugin.hardware_errors(options.get("device_plugin_vgpu"), sized, base)
    if errors:
        return {"errors": errors}
    # What a vGPU request without memory gets, recorded on the device ConfigMap for the report: the whole card, or
    # the even share as the default-memory policy states it (tasks/admission.yml installs that policy).
    default_memory = "whole-card"
    if options.get("device_plugin_default_memory") == "even-share":
        policy = _admission.default_memory_policy_for_plan(planned, "gpufleet-vgpu-default-memory")
        default_memory = policy[0]["metadata"]["annotations"][_contract.DEFAULT_MEMORY]
    configmaps = [{"name": _contract.DEVICE_CONFIGMAP, "annotations": {_contract.DEFAULT_MEMORY: default_memory},
                   "data": {_contract.DEVICE_CONFIG_KEY: _vgpu_plugin.device_config_yaml(planned["device_config"])}},
                  {"name": _contract.NODE_CONFIGMAP, "annotations": {},
                   "data": {_contract.NODE_CONFIG_KEY: planned["node_config"]}}]
    # Inside a run, only the nodes whose labels differ from the cluster's (the preflight reads no cluster: all).
    planned["node_label_patches"] = _vgpu_plugin.label_patches_to_send(planned["node_label_patches"],
                                                                       context.get("nodes"))
    return dict(planned, errors=[], configmaps=configmaps, names=_contract.names(), default_memory=default_memory,
                runtime={"cdi": runtime["cdi"], "name": runtime["runtime"]},
                plugin_version=options.get("device_plugin_version"),
                sources={node: spec["source"] for node, spec in planned["expected"].items()})


def monitoring(options, context):
    settings = {"scheduler_job": (options.get("monitoring_jobs") or {}).get("scheduler"),
                "controllers_job": (options.get("monitoring_jobs") or {}).get("controllers"),
                "monitor_job": (options.get("monitoring_jobs") or {}).get("monitor"),
                "volcano_namespace": options.get("monitoring_volcano_namespace"),
                "scheduler_service": options.get("monitoring_scheduler_service"),
                "controllers_service": options.get("monitoring_controllers_service"),
                "plugin_namespace": options.get("monitoring_plugin_namespace"),
                "plugin_pod_label": list(_contract.PLUGIN_POD_LABEL),
                "dashboard_namespace": options.get("monitoring_dashboard_namespace"),
                "dashboard_uid": options.get("monitoring_dashboard_uid"),
                "dashboard_title": options.get("monitoring_dashboard_title"),
                "scrape_interval": options.get("monitoring_scrape_interval"),
                "rule_interval": options.get("monitoring_rule_interval"),
                "thresholds": options.get("monitoring_alert_for"),
                "alert_labels": options.get("monitoring_alert_labels"),
                "gpu_nodes": options.get("monitoring_gpu_nodes"),
                "gpu_health": bool(options.get("monitoring_gpu_health")),
                "gpu_health_max_age": options.get("monitoring_gpu_health_max_age")}
    return _monitoring.bundle(settings, options.get("monitoring_operator_labels"),
                              options.get("monitoring_dashboard_labels"))


def smoke_test(options, context):
    return {"errors": _waits(options, ("smoke_test_timeout",))}


PLANNERS = {"node_python": node_python, "nvidia_driver": nvidia_driver, "container_runtime": container_runtime,
            "gpu_verify": gpu_verify, "volcano": volcano, "device_plugin": device_plugin, "monitoring": monitoring,
            "smoke_test": smoke_test}


def plan(role, options, context=None):
    """{"errors": [...], ...the role's plan} from its option values; ValueError for a role without a planner."""
    if role not in PLANNERS:
        raise ValueError("no planner for role %r (known: %s)" % (role, ", ".join(sorted(PLANNERS))))
    return PLANNERS[role](options, context or {})
