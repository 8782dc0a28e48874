"""Registration checks: what the device_plugin role's wait, the volcano role's wait after a rollout and
vgpu_smoke's metrics check compare."""

import datetime

import pytest

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _vgpu_registration as reg

# What the device_plugin role's plan expects (plugin_utils/_vgpu_plugin.plan): rig01 5 GPUs split 2, rig02 split 3.
EXPECTED = {
    "rig01": {"host": "rig01", "gpus": 5, "split": 2, "volcano.sh/vgpu-number": 10,
              "volcano.sh/vgpu-memory": 40940, "volcano.sh/vgpu-cores": 500},
    "rig02": {"host": "rig02", "gpus": 5, "split": 3, "volcano.sh/vgpu-number": 15,
              "volcano.sh/vgpu-memory": 81880, "volcano.sh/vgpu-cores": 500},
}


def test_check_registration_names_the_node():
    expected = EXPECTED
    full = {"volcano.sh/vgpu-number": "10", "volcano.sh/vgpu-memory": "40940", "volcano.sh/vgpu-cores": "500"}
    nodes = [{"metadata": {"name": "rig01"}, "status": {"allocatable": full}},
             {"metadata": {"name": "rig02"}, "status": {"allocatable": {"volcano.sh/vgpu-number": "10"}}}]
    result = reg.check_registration(nodes, expected)
    assert not result["ok"]
    assert result["problems"][0] == "node rig02: volcano.sh/vgpu-number is 10, expected 15 (5 GPUs x split 3)"
    assert "node rig02: volcano.sh/vgpu-cores is missing" in result["problems"][2]
    assert reg.check_registration(nodes[:1], {"rig01": expected["rig01"]})["ok"]


@pytest.mark.parametrize("value, expected", [
    ("Reported 2026-12-01 10:57:37.178939992 +0000 UTC m=+0.142731324", (2026, 12, 1, 10, 57, 37, 178939)),
    ("Reported 2026-12-01 10:57:37 +0200 CEST", (2026, 12, 1, 8, 57, 37, 0)),
    ("Requesting_2026.12.01 10:57:37", None),
    ("", None),
    (None, None),
])
def test_handshake_time_reads_go_time_strings(value, expected):
    parsed = reg.handshake_time(value)
    if expected is None:
        assert parsed is None
    else:
        utc = parsed.astimezone(datetime.timezone.utc)
        assert (utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second, utc.microsecond) == expected


def scheduler_pod(started, phase="Running", deleting=False):
    meta = {"name": "volcano-scheduler-x"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T11:00:00Z"
    return {"metadata": meta, "status": {"phase": phase, "containerStatuses": [
        {"state": {"running": {"startedAt": started}}}]}}


def test_after_a_scheduler_restart_a_node_counts_only_once_it_re_registered():
    """Volcano builds a node's vGPU devices only at a node update after its first session: the plugin's next
    handshake, at least 10 s after the running scheduler container started, is what the volcano role waits for."""
    def node(name, reported):
        annotations = {reg.REGISTER: "GPU-1,2,8188,NVIDIA-NVIDIA GeForce RTX 4090,true,hami-core:",
                       "volcano.sh/node-vgpu-handshake": reported} if reported else {}
        return {"metadata": {"name": name, "annotations": annotations}}
    pods = [scheduler_pod("2026-12-01T11:00:00Z", deleting=True), scheduler_pod("2026-12-01T11:05:00Z")]
    assert reg.scheduler_started(pods) == "2026-12-01T11:05:00Z"
    nodes = [node("rig01", "Reported 2026-12-01 11:05:05.1 +0000 UTC"),   # before the first session: unseen
             node("rig02", "Reported 2026-12-01 11:05:31.2 +0000 UTC"),   # after it
             node("master0", None)]                                       # no vGPU plugin: never waited for
    assert reg.unseen_nodes(nodes, pods) == ["rig01"]
    assert reg.unseen_nodes(nodes, []) == []            # no running scheduler: nothing to wait for yet
    assert reg.unseen_nodes(nodes, [scheduler_pod("2026-12-01T11:05:00Z", phase="Pending")]) == []


@pytest.mark.parametrize("reported, due", [
    ("Reported 2026-12-01 11:05:10.000001 +0000 UTC m=+0.1", None),      # just after the first session's margin
    ("Reported 2026-12-01 11:05:09.9 +0000 UTC m=+0.1", "11:05:10"),     # before it: the scheduler may not see it
    ("Reported 2026-12-01 12:05:20 +0100 CET", None),                    # another zone, same instant + 20 s
    ("Reported 2026-12-01 11:05:20", "11:05:10"),                        # no zone: not what the plugin writes
    (None, "11:05:10"),
])
def test_registration_due(reported, due):
    started = reg.scheduler_start_time([scheduler_pod("2026-12-01T11:05:00Z")])
    node = {"metadata": {"name": "rig01", "annotations": {reg.HANDSHAKE: reported} if reported else {}}}
    got = reg.registration_due(node, started)
    assert (got.strftime("%H:%M:%S") if got else None) == due


def quiet_node(name, resync=None):
    """A node of a plugin that writes only its registration, and only when it changed (the plugin after v1.12.0)."""
    annotations = {reg.REGISTER: "GPU-1,2,8188,NVIDIA-NVIDIA GeForce RTX 4090,true,hami-core:"}
    if resync:
        annotations[reg.RESYNC] = resync
    return {"metadata": {"name": name, "annotations": annotations}}


def test_a_plugin_without_handshake_is_seen_once_marked_for_the_running_scheduler():
    pods = [scheduler_pod("2026-12-01T11:05:00Z")]
    nodes = [quiet_node("rig01"),                                   # never changed since the start: unseen
             quiet_node("rig02", resync="2026-12-01T11:00:00Z"),    # marked for the scheduler before: unseen
             quiet_node("rig03", resync="2026-12-01T11:05:00Z")]    # marked for this one
    assert reg.unseen_nodes(nodes, pods) == ["rig01", "rig02"]


def test_a_mark_counts_however_the_start_time_is_written():
    """The role marks from k8s_info (startedAt as the API server writes it); vgpu_smoke reads the scheduler pod
    through a typed client, which writes the same instant as +00:00."""
    typed = [scheduler_pod("2026-12-01T11:05:00+00:00")]
    assert reg.unseen_nodes([quiet_node("rig01", resync="2026-12-01T11:05:00Z")], typed) == []
    assert reg.unseen_nodes([quiet_node("rig01", resync="2026-12-01T11:04:59Z")], typed) == ["rig01"]


@pytest.mark.parametrize("started", ["yesterday", "2026-12-01 11:05:00", "2026-12-01T11:05:00"])
def test_an_unreadable_scheduler_start_is_an_error_not_every_node_seen(started):
    with pytest.raises(ValueError, match="startedAt '%s' is not an RFC 3339 time" % started):
        reg.unseen_nodes([quiet_node("rig01")], [scheduler_pod(started)])


@pytest.mark.parametrize("now, wait", [
    ("2026-12-01T11:05:02Z", 9),     # 8 s before the first session is due, and a second to be sure
    ("2026-12-01T11:05:30Z", 0),     # due already
])
def test_resync_patches_wait_for_the_first_session_and_mark_only_unseen_nodes(now, wait):
    pods = [scheduler_pod("2026-12-01T11:05:00Z")]
    nodes = [quiet_node("rig01"), quiet_node("rig02", resync="2026-12-01T11:05:00Z"), {"metadata": {"name": "m0"}}]
    moment = datetime.datetime.strptime(now, "%Y-%m-%dT%H:%M:%S%z")
    result = reg.resync_patches(nodes, pods, moment)
    assert result["wait_seconds"] == wait
    assert result["patches"] == [{"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "rig01", "annotations": {reg.RESYNC: "2026-12-01T11:05:00Z"}}}]
    # Once patched, nothing is left to mark: a rerun changes nothing.
    marked = [quiet_node("rig01", resync="2026-12-01T11:05:00Z")]
    assert reg.resync_patches(marked, pods, moment) == {"wait_seconds": 0, "patches": []}


def test_memory_planned_from_a_minimum_is_a_floor():
    """Sizes from the card group's minimums (24000 MiB a card) plan 8000 units a 4090: the 8188 it registers passes,
    fewer fails naming the source; exact sizes still want exactly what they plan."""
    want = dict(EXPECTED["rig01"], **{"volcano.sh/vgpu-memory": 40000, "memory_mib": 120000, "source": "minimum",
                                      "memory_exact": False})
    registered = {"volcano.sh/vgpu-number": "10", "volcano.sh/vgpu-memory": "40940", "volcano.sh/vgpu-cores": "500"}
    node = {"metadata": {"name": "rig01"}, "status": {"allocatable": registered}}
    assert reg.check_registration([node], {"rig01": want})["ok"]
    short = dict(registered, **{"volcano.sh/vgpu-memory": "39000"})
    problems = reg.check_registration([{"metadata": {"name": "rig01"}, "status": {"allocatable": short}}],
                                      {"rig01": want})["problems"]
    assert problems == ["node rig01: volcano.sh/vgpu-memory is 39000, expected at least 40000 (5 GPUs of at least "
                        "24000 MiB, from minimum)"]
    exact = dict(want, memory_exact=True)
    assert not reg.check_registration([node], {"rig01": exact})["ok"]


# The plugin's DaemonSet and pods as k8s_info lists them; NOW is the controller's clock.
NOW = datetime.datetime(2026, 12, 7, 12, 0, 0, tzinfo=datetime.timezone.utc)


def daemonset(generation=2, observed=2, desired=2, updated=2, name="volcano-device-plugin"):
    return {"metadata": {"name": name, "generation": generation},
            "status": {"observedGeneration": observed, "desiredNumberScheduled": desired,
                       "updatedNumberScheduled": updated}}


def plugin_pod(node, ready_ago=600, ready=True, owner="volcano-device-plugin", deleting=False, uid=None):
    since = (NOW - datetime.timedelta(seconds=ready_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = {"name": "plugin-%s-%s" % (node, uid or ready_ago), "uid": uid or "%s-%s" % (node, ready_ago),
            "ownerReferences": [{"kind": "DaemonSet", "name": owner}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T11:59:00Z"
    return {"metadata": meta, "spec": {"nodeName": node},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True"},
                                      {"type": "Ready", "status": "True" if ready else "False",
                                       "lastTransitionTime": since}]}}


def rollout(daemonsets, pods, observed=None, period=10):
    return reg.rollout_problems("kube-system", ["volcano-device-plugin"], daemonsets, pods, EXPECTED, NOW,
                                observed or {}, period)


SETTLED = [plugin_pod("rig01"), plugin_pod("rig02")]


@pytest.mark.parametrize("daemonsets, pods, problems", [
    # Converged: pods Ready for minutes, nothing to wait for.
    ([daemonset()], SETTLED, []),
    # The case a converge hit: the DaemonSet changed, its controller replaced one pod and not yet the other - the
    # nodes still show the old pods' registrations, which must not count.
    ([daemonset(updated=1)], SETTLED,
     ["DaemonSet kube-system/volcano-device-plugin: rollout in progress, 1 of 2 pods updated"]),
    ([daemonset(generation=3)], SETTLED,
     ["DaemonSet kube-system/volcano-device-plugin: its controller has not seen the latest change yet"]),
    ([], SETTLED, ["DaemonSet kube-system/volcano-device-plugin: not in the cluster"]),
    # Rolled out, but rig02's new pod is 4 s old: kubelet may not have posted the node's status since.
    ([daemonset()], [plugin_pod("rig01"), plugin_pod("rig02", ready_ago=4)],
     ["node rig02: plugin pod plugin-rig02-4 Ready for 4 s; its registration counts after 15 s (kubelet posts the "
      "node's status every 10 s)"]),
    ([daemonset()], [plugin_pod("rig01"), plugin_pod("rig02", ready=False)],
     ["node rig02: plugin pod plugin-rig02-600 is not Ready"]),
    # The replaced pod still terminating does not count; another DaemonSet's pod on the node does not either.
    ([daemonset()], [plugin_pod("rig01"), plugin_pod("rig02", deleting=True),
                     plugin_pod("rig02", owner="nvidia-device-plugin-daemonset", uid="other")],
     ["node rig02: no pod of DaemonSet volcano-device-plugin runs there"]),
])
def test_rollout_problems(daemonsets, pods, problems):
    assert rollout(daemonsets, pods) == problems


def test_a_registration_counts_after_kubelets_status_period_plus_the_margin():
    fresh = [plugin_pod("rig01"), plugin_pod("rig02", ready_ago=16)]
    assert rollout([daemonset()], fresh) == []
    assert rollout([daemonset()], fresh, period=12) == [
        "node rig02: plugin pod plugin-rig02-16 Ready for 16 s; its registration counts after 17 s (kubelet posts the "
        "node's status every 12 s)"]


def test_a_controller_clock_behind_the_cluster_waits_only_as_long_as_it_saw_the_pod_ready():
    # The Ready time is in this clock's future (the cluster's clock ahead): what the wait itself saw counts.
    ahead = [plugin_pod("rig01"), plugin_pod("rig02", ready_ago=-120, uid="new")]
    waiting = rollout([daemonset()], ahead, observed={"new": 5})
    assert waiting[0].startswith("node rig02: plugin pod plugin-rig02-new Ready for 5 s;")
    assert rollout([daemonset()], ahead, observed={"new": 15}) == []


def test_a_ready_time_that_cannot_be_read_counts_what_the_wait_saw():
    unreadable = plugin_pod("rig02", uid="odd")
    unreadable["status"]["conditions"][1]["lastTransitionTime"] = None
    assert rollout([daemonset()], [plugin_pod("rig01"), unreadable], observed={"odd": 15}) == []
    assert "Ready for 0 s" in rollout([daemonset()], [plugin_pod("rig01"), unreadable])[0]


def test_the_filters_name_an_unreadable_scheduler_start():
    from ansible.errors import AnsibleFilterError  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpufleet.vgpu.plugins.filter import vgpu_plugin  # pylint: disable=import-outside-toplevel
    pods = [scheduler_pod("Mon Dec 1 11:05:00 2026")]
    with pytest.raises(AnsibleFilterError, match="vgpu_unseen_nodes: the running Volcano scheduler's startedAt"):
        vgpu_plugin.vgpu_unseen_nodes([quiet_node("rig01")], pods)
    with pytest.raises(AnsibleFilterError, match="vgpu_resync_patches: .*'Mon Dec 1 11:05:00 2026' is not an RFC 3339 time"):
        vgpu_plugin.vgpu_resync_patches([quiet_node("rig01")], pods, "2026-12-01T11:06:00Z")
