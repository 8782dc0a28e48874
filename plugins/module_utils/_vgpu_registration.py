# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Whether Volcano's scheduler has seen each GPU node's vGPU registration.

Pure functions, no Ansible. Ships to the kube_control host with module ``vgpu_smoke`` (its metrics check waits for
re-registration) and serves on the controller the ``device_plugin`` role's wait for the registration (filter
``vgpu_registration_check``) and the ``volcano`` role's wait after a scheduler rollout (filter
``vgpu_unseen_nodes``); the plan the registration is compared with is controller-only (plugin_utils/_vgpu_plugin.py).
``rollout_problems`` is the part of the device_plugin wait that reads the plugin's DaemonSets and pods, and
``wait_for_registration`` its loop (module ``vgpu_registration_wait``, on the host that reaches the API server).
"""

from __future__ import annotations

import datetime
import time

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _contract

# Volcano (1.15.1 and before) builds a GPU node's vGPU devices into its scheduler cache only when the node object
# changes after the scheduler's first session: deviceshare sets vgpu.VGPUEnable when its plugin is instantiated for a
# session (plugins/deviceshare/deviceshare.go: New -> enablePredicate), after the cache has built its nodes
# (api/node_info.go: setNodeOthersResource skips vGPU devices while VGPUEnable is false; Clone copies the cache's
# Others). Until the node changes, vGPU pods are placed there without a device and the node rejects them
# ("cannot get valid pod"). Plugin v1.12.0 and before re-register every 30 s (the handshake annotation), which
# rebuilds the node; the plugin after v1.12.0 (its main branch since 9a6973b) writes the Node only when its
# registration changed, so nothing would. The volcano role therefore changes such a node itself once the first
# session is due: RESYNC, set to the running scheduler's start time, is that change and the record of it. The first
# session runs within seconds of the scheduler's start.
FIRST_SESSION_MARGIN_S = 10
# kubelet writes a node's allocatable at most once per nodeStatusUpdateFrequency, so for that long after a plugin
# pod replaced another the node may still show what the old pod registered (its gRPC endpoint is gone, the devices
# are unhealthy, and the next status update sets the resource to 0 until the new pod registers). A pod counts once it
# has been Ready for that period plus this margin (the status update itself and the API round trip).
READY_MARGIN_S = 5
HANDSHAKE = _contract.HANDSHAKE
REGISTER = _contract.REGISTER
RESYNC = _contract.SCHEDULER_RESYNC


def handshake_time(value):
    """'Reported 2026-12-01 10:57:37.178939992 +0000 UTC m=+0.14' (Go time.String) -> datetime, or None."""
    parts = (value or "").split()
    if len(parts) < 4 or parts[0] != "Reported":
        return None
    day, clock, offset = parts[1], parts[2], parts[3]
    if "." in clock:
        whole, fraction = clock.split(".", 1)
        clock = "%s.%s" % (whole, fraction[:6])
    else:
        clock += ".0"
    try:
        return datetime.datetime.strptime("%s %s %s" % (day, clock, offset), "%Y-%m-%d %H:%M:%S.%f %z")
    except ValueError:
        return None


def scheduler_started(pods):
    """When the running scheduler container of these pods (k8s_info dicts) started: RFC 3339 text, or None."""
    times = []
    for pod in pods or []:
        if (pod.get("metadata") or {}).get("deletionTimestamp") or (pod.get("status") or {}).get("phase") != "Running":
            continue
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            started = ((status.get("state") or {}).get("running") or {}).get("startedAt")
            if started:
                times.append(started)
    return max(times) if times else None


def registration_due(node, started):
    """When the scheduler that started at `started` (datetime) has seen this node's vGPUs: None once the plugin
    re-registered (handshake) FIRST_SESSION_MARGIN_S after that start, or the volcano role marked the node for this
    start (RESYNC); else the time after which the node must change."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    # Compared as times: the role writes the mark as the API server wrote startedAt ('...Z'), while a typed client
    # serializes the same instant as '...+00:00' (vgpu_smoke).
    if kube_time(annotations.get(RESYNC)) == started:
        return None
    reported = handshake_time(annotations.get(HANDSHAKE))
    due = started + datetime.timedelta(seconds=FIRST_SESSION_MARGIN_S)
    return None if reported is not None and reported >= due else due


def scheduler_start_time(scheduler_pods):
    """scheduler_started() as a datetime, or None where no scheduler runs. A start time that is not RFC 3339 raises
    ValueError: taking every node as seen would let vGPU pods onto nodes the scheduler has no devices for."""
    text = scheduler_started(scheduler_pods)
    if text is None:
        return None
    started = kube_time(text)
    if started is None:
        raise ValueError("the running Volcano scheduler's startedAt %r is not an RFC 3339 time" % (text,))
    return started


def kube_time(text):
    """An API object's timestamp ('2026-12-07T14:04:55Z', RFC 3339 in whole seconds; '+00:00' as a typed client
    writes it) as a datetime; None where it is missing or unreadable."""
    if not text:
        return None
    try:
        return datetime.datetime.strptime(str(text).replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None


def unseen_nodes(nodes, scheduler_pods):
    """Names of the vGPU nodes (k8s_info dicts with the plugin's register annotation) that have not changed since
    the running scheduler's first session - no handshake since, and no RESYNC mark for this scheduler: Volcano places
    vGPU pods there without a device until they have. Nodes without a vGPU registration are not waited for."""
    started = scheduler_start_time(scheduler_pods)
    if started is None:
        return []
    return sorted(n["metadata"]["name"] for n in nodes or []
                  if REGISTER in ((n.get("metadata") or {}).get("annotations") or {})
                  and registration_due(n, started) is not None)


def resync_patches(nodes, scheduler_pods, now):
    """{seconds to wait, patches}: the Node patches (merge patches of RESYNC, k8s definitions) that make the
    running scheduler build the vGPU devices of every node it has not seen, and how long to wait before sending them
    so that its first session has enabled vGPUs (FIRST_SESSION_MARGIN_S after its start; `now` a datetime)."""
    names = unseen_nodes(nodes, scheduler_pods)
    if not names:
        return {"wait_seconds": 0, "patches": []}
    started_text = scheduler_started(scheduler_pods)
    due = scheduler_start_time(scheduler_pods) + datetime.timedelta(seconds=FIRST_SESSION_MARGIN_S)
    return {"wait_seconds": max(0, int((due - now).total_seconds()) + 1),
            "patches": [{"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": name, "annotations": {RESYNC: started_text}}} for name in names]}


def check_registration(nodes, expected):
    """Compare Node objects (dicts as k8s_info returns them) with plan()['expected']; one line per problem.
    Whether Volcano's scheduler has seen the registration is unseen_nodes() (the volcano role waits for it)."""
    seen = {n["metadata"]["name"]: n for n in nodes}
    problems = []
    for name in sorted(expected):
        want = expected[name]
        node = seen.get(name)
        if node is None:
            problems.append("node %s: not in the cluster (device_plugin_node_name of host %s?)" % (name, want["host"]))
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        for resource in ("volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores"):
            have = allocatable.get(resource)
            # Memory planned from a minimum (want["memory_exact"] false: the card group's expectations) is what
            # the node registers at least.
            if resource == "volcano.sh/vgpu-memory" and want.get("memory_exact") is False:
                if have is None or not str(have).isdigit() or int(have) < int(want[resource]):
                    problems.append("node %s: %s is %s, expected at least %s (%d GPUs of at least %d MiB, from %s)"
                                    % (name, resource, have if have is not None else "missing", want[resource],
                                       want["gpus"], want["memory_mib"] // max(want["gpus"], 1), want["source"]))
            elif str(have) != str(want[resource]):
                problems.append("node %s: %s is %s, expected %s (%d GPUs x split %d)"
                                % (name, resource, have if have is not None else "missing", want[resource],
                                   want["gpus"], want["split"]))
    return {"ok": not problems, "problems": problems}


def _ready_condition(pod):
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})


def pod_ready(pod):
    """Whether the pod's Ready condition is True."""
    return _ready_condition(pod).get("status") == "True"


def daemonset_rollout(daemonset):
    """None once the DaemonSet's controller has put its current template on every node it selects (as `kubectl
    rollout status` reads the status: generation observed, every scheduled pod updated), else why not."""
    meta, status = daemonset.get("metadata") or {}, daemonset.get("status") or {}
    if (status.get("observedGeneration") or 0) < (meta.get("generation") or 0):
        return "its controller has not seen the latest change yet"
    desired, updated = status.get("desiredNumberScheduled") or 0, status.get("updatedNumberScheduled") or 0
    if updated < desired:
        return "rollout in progress, %d of %d pods updated" % (updated, desired)
    return None


def rollout_problems(namespace, names, daemonsets, pods, expected, now, observed, status_period):
    """One line per reason the nodes' registrations cannot be taken as the running plugin's yet: a DaemonSet in
    `names` missing or still rolling out, or an expected node whose plugin pod is missing, not Ready, or Ready for
    less than status_period + READY_MARGIN_S seconds (kubelet's status may still be the replaced pod's).

    daemonsets, pods: k8s_info dicts (the pods of those DaemonSets); now: datetime (UTC); observed: pod uid ->
    seconds the caller has itself seen the pod Ready (a controller clock behind the cluster's makes the Ready time
    look too recent; this bounds that wait)."""
    problems = []
    found = {d["metadata"]["name"]: d for d in daemonsets or []}
    for name in names:
        if name not in found:
            problems.append("DaemonSet %s/%s: not in the cluster" % (namespace, name))
            continue
        why = daemonset_rollout(found[name])
        if why:
            problems.append("DaemonSet %s/%s: %s" % (namespace, name, why))
    settle = status_period + READY_MARGIN_S
    by_node = {}
    for pod in pods or []:
        meta = pod.get("metadata") or {}
        owners = {o.get("name") for o in meta.get("ownerReferences") or [] if o.get("kind") == "DaemonSet"}
        if meta.get("deletionTimestamp") or not owners & set(names):
            continue
        by_node.setdefault((pod.get("spec") or {}).get("nodeName"), []).append(pod)
    for node in sorted(expected):
        running = by_node.get(node) or []
        if not running:
            problems.append("node %s: no pod of DaemonSet %s runs there" % (node, " or ".join(names)))
            continue
        for pod in running:
            name = pod["metadata"]["name"]
            if not pod_ready(pod):
                problems.append("node %s: plugin pod %s is not Ready" % (node, name))
                continue
            # A Ready time missing or unreadable: only what the caller saw itself counts.
            since = kube_time(_ready_condition(pod).get("lastTransitionTime"))
            ready = max((now - since).total_seconds() if since else 0, observed.get(pod["metadata"].get("uid"), 0))
            if ready < settle:
                problems.append("node %s: plugin pod %s Ready for %d s; its registration counts after %d s (kubelet "
                                "posts the node's status every %d s)" % (node, name, max(ready, 0), settle,
                                                                         status_period))
    return problems


def wait_for_registration(list_objects, expected, daemonsets=(), namespace=None, status_period=10, timeout=300,
                          delay=5, monotonic=time.monotonic, sleep=time.sleep, utcnow=None):
    """Poll every `delay` seconds until check_registration() of the listed Nodes passes - with `daemonsets`, also
    rollout_problems() of those DaemonSets in `namespace` and their pods - or the next poll would end after
    `timeout` seconds. Returns {ok, check, resources (the last poll's Nodes), polls, waited_s}; a listing that fails
    ends the wait at once: {ok: False, failed: message, polls}.

    list_objects(kind, api_version, namespace=None, label_selectors=None) -> {resources: [dicts as k8s_info returns
    them]} or {failed: True, msg}; one client serves every listing of every poll (a process per listing, as
    k8s_info tasks, cost about a second each in the lab)."""
    utcnow = utcnow or (lambda: datetime.datetime.now(datetime.timezone.utc))
    started = monotonic()
    polls = 0
    first_ready = {}  # pod uid -> when this wait first saw it Ready (monotonic)
    while True:
        polls += 1
        listed = list_objects("Node", "v1")
        if listed.get("failed"):
            return {"ok": False, "polls": polls, "failed": "could not list the nodes: %s" % listed.get("msg", "")}
        nodes = listed.get("resources") or []
        check = check_registration(nodes, expected)
        if daemonsets:
            rollout = _poll_rollout(list_objects, namespace, daemonsets, expected, status_period, first_ready,
                                    monotonic(), utcnow())
            if "failed" in rollout:
                return {"ok": False, "polls": polls, "failed": rollout["failed"]}
            check = {"ok": check["ok"] and not rollout["problems"], "problems": rollout["problems"] + check["problems"]}
        waited = monotonic() - started
        if check["ok"] or waited + delay > timeout:
            return {"ok": check["ok"], "check": check, "resources": nodes, "polls": polls, "waited_s": round(waited, 1)}
        sleep(delay)


def _poll_rollout(list_objects, namespace, names, expected, status_period, first_ready, clock, now):
    """{problems} of the plugin's DaemonSets and their pods on the expected nodes, or {failed: message};
    first_ready (pod uid -> monotonic time first seen Ready) is updated from this poll."""
    listed = list_objects("DaemonSet", "apps/v1", namespace=namespace)
    if listed.get("failed"):
        return {"failed": "could not list the DaemonSets of %s: %s" % (namespace, listed.get("msg", ""))}
    found = [d for d in listed.get("resources") or [] if d["metadata"]["name"] in names]
    pods = []
    for daemonset in found:
        selector = ((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        listed = list_objects("Pod", "v1", namespace=namespace,
                              label_selectors=["%s=%s" % item for item in sorted(selector.items())])
        if listed.get("failed"):
            return {"failed": "could not list the pods of DaemonSet %s/%s: %s"
                              % (namespace, daemonset["metadata"]["name"], listed.get("msg", ""))}
        pods += listed.get("resources") or []
    for pod in pods:
        if pod_ready(pod):
            first_ready.setdefault(pod["metadata"].get("uid"), clock)
    observed = {uid: clock - since for uid, since in first_ready.items()}
    return {"problems": rollout_problems(namespace, names, found, pods, expected, now, observed, status_period)}
