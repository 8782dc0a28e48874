"""The article's gang test on the lab's real Volcano scheduler (v1.15.1) and the real vGPU plugin, part of
`make test` (`make lab-test`): nothing in the lab restarts the scheduler or refreshes the plugin's registration
faster than the plugin does (every 30 s), and the gang must run once it fits exactly.
"""

import time

from kubernetes import client

from labkit import vgpu_pod_spec, wait_for


def test_gang_job_waits_for_enough_vgpus_then_runs_whole(plugin):
    """The article's gang test on the real Volcano scheduler: 20 vGPUs, a holder keeps 16, a 5-pod job with
    minAvailable 5 must not bind any pod until the holder frees one more vGPU."""
    lab = plugin
    apps, core = client.AppsV1Api(lab["api"]), client.CoreV1Api(lab["api"])
    objects = client.CustomObjectsApi(lab["api"])
    core.create_namespace({"metadata": {"name": "gang"}})
    # The holder's pods name their PodGroup from the start, as a Volcano Job's pods do.
    objects.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", "gang", "podgroups", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "holder"},
        "spec": {"minMember": 1, "queue": "default"}})
    apps.create_namespaced_deployment("gang", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "holder"},
        "spec": {"replicas": 16, "selector": {"matchLabels": {"app": "holder"}},
                 "template": {"metadata": {"labels": {"app": "holder"},
                                           "annotations": {"scheduling.k8s.io/group-name": "holder"}},
                              "spec": vgpu_pod_spec()}}})

    def holders_running():
        pods = core.list_namespaced_pod("gang", label_selector="app=holder").items
        return [p.status.phase for p in pods].count("Running") == 16 or len(pods)
    wait_for(holders_running, 120, "16 holder pods Running")

    objects.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "gang", "jobs", {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train"},
        "spec": {"minAvailable": 5, "schedulerName": "volcano", "queue": "default",
                 "tasks": [{"name": "worker", "replicas": 5, "template": {"spec": vgpu_pod_spec(scheduler_name=None)}}]}})

    def job_pods():
        return core.list_namespaced_pod("gang", label_selector="volcano.sh/job-name=train").items
    wait_for(lambda: len(job_pods()) == 5 or len(job_pods()), 60, "5 job pods created")
    time.sleep(10)  # ten scheduling cycles (the chart's 1 s period): a partial bind would show up here
    assert [p.spec.node_name for p in job_pods()] == [None] * 5, "gang job bound pods with only 4 vGPUs free"

    # The holder frees one vGPU: 5 free for a gang of 5, an exact fit.
    apps.patch_namespaced_deployment_scale("holder", "gang", {"spec": {"replicas": 15}})

    def gang_running():
        phases = [p.status.phase for p in job_pods()]
        if phases.count("Running") == 5:
            return True
        groups = objects.list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", "gang", "podgroups")
        return phases, [(g["metadata"]["name"], g.get("status", {}).get("phase"),
                         [c.get("message") for c in g.get("status", {}).get("conditions", [])][-1:])
                        for g in groups["items"]]
    try:
        wait_for(gang_running, 60, "all 5 gang pods Running")
    finally:
        core.delete_namespace("gang")
