"""Table tests for the capacity report and the pure parts of the smoke tests."""

from types import SimpleNamespace

import pytest

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _capacity as cap
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _smoke as smoke

REGISTER = ("GPU-a0,2,8188,NVIDIA-NVIDIA GeForce RTX 4090,true,hami-core:"
            "GPU-a1,2,8188,NVIDIA-NVIDIA GeForce RTX 4090,true,hami-core:")


def node(name, register, allocatable=None):
    return {"metadata": {"name": name, "annotations": {cap.REGISTER: register} if register else {}},
            "status": {"allocatable": allocatable or {}}}


def pod(name, node_name, devices, phase="Running"):
    return {"metadata": {"name": name, "annotations": {cap.POD_DEVICES: devices}},
            "spec": {"nodeName": node_name}, "status": {"phase": phase}}


@pytest.mark.parametrize("value, count, first", [
    (REGISTER, 2, {"uuid": "GPU-a0", "split": 2, "memory_units": 8188, "model": "NVIDIA GeForce RTX 4090",
                   "healthy": True, "mode": "hami-core"}),
    ("GPU-x,10,16376,NVIDIA-RTX,false:", 1, {"uuid": "GPU-x", "split": 10, "memory_units": 16376, "model": "RTX",
                                             "healthy": False, "mode": "hami-core"}),
    ("", 0, None),
    ("garbage", 0, None),
])
def test_parse_register(value, count, first):
    cards = cap.parse_register(value)
    assert len(cards) == count
    if first:
        assert cards[0] == first


@pytest.mark.parametrize("value, want", [
    ("GPU-a0,NVIDIA,1000,0:", [{"uuid": "GPU-a0", "memory_units": 1000, "cores": 0}]),
    ("GPU-a0,NVIDIA,10,0:GPU-a1,NVIDIA,20,50:;GPU-a1,NVIDIA,5,0:", [
        {"uuid": "GPU-a0", "memory_units": 10, "cores": 0}, {"uuid": "GPU-a1", "memory_units": 20, "cores": 50},
        {"uuid": "GPU-a1", "memory_units": 5, "cores": 0}]),
    (None, []),
    ("", []),
])
def test_parse_pod_devices(value, want):
    assert cap.parse_pod_devices(value) == want


def test_report_per_gpu_and_totals():
    nodes = [node("rig01", REGISTER, {"volcano.sh/vgpu-number": "4", "volcano.sh/vgpu-memory": "16376",
                                      "volcano.sh/vgpu-cores": "200"}), node("master0", None)]
    pods = [pod("a", "rig01", "GPU-a0,NVIDIA,1000,0:"), pod("b", "rig01", "GPU-a0,NVIDIA,500,0:"),
            pod("done", "rig01", "GPU-a1,NVIDIA,999,0:", phase="Succeeded"), pod("pending", None, "GPU-a1,NVIDIA,7,0:")]
    report = cap.report(nodes, pods, memory_factor=3)
    assert [r["node"] for r in report["nodes"]] == ["rig01"]  # nodes without a registration are not GPU nodes
    gpu0, gpu1 = report["nodes"][0]["gpus"]
    assert (gpu0["memory_mib"], gpu0["memory_per_vgpu_units"], gpu0["memory_per_vgpu_mib"]) == (24564, 4094, 12282)
    assert (gpu0["vgpus_allocated"], gpu0["memory_mib_allocated"]) == (2, 4500)
    assert gpu1["vgpus_allocated"] == 0  # finished and unbound pods hold nothing
    assert report["totals"] == {"gpus": 2, "vgpus": 4, "vgpus_allocated": 2, "memory_mib": 49128,
                                "memory_mib_allocated": 4500}
    text = cap.markdown(report)
    assert "| rig01 | 0 | NVIDIA GeForce RTX 4090 | 24564 | 2 | 4094 / 12282 | 2 of 2 | 4500 |" in text
    assert "Fleet: 2 GPUs, 4 vGPUs (2 allocated)" in text
    # Without a recorded policy: Volcano's rule, said where the even-split column could mislead.
    assert "gets **the whole card's memory**" in text and "not a default" in text


def test_report_states_the_even_share_the_role_recorded():
    recorded = "2729 units = 8187 MiB: NVIDIA GeForce RTX 4070 SUPER on rig02 (16376 MiB) / split 2"
    text = cap.markdown(cap.report([node("rig01", REGISTER, {})], [], 3, recorded))
    assert "gets 2729 units = 8187 MiB: NVIDIA GeForce RTX 4070 SUPER on rig02" in text
    assert "whole card" not in text


METRICS = """# HELP volcano_vgpu_device_allocated_memory The number of vgpu memory allocated in this card
# TYPE volcano_vgpu_device_allocated_memory gauge
volcano_vgpu_device_allocated_memory{NodeName="rig01",devID="GPU-a0"} 1500
volcano_vgpu_device_allocated_memory{NodeName="rig01",devID="GPU-a1"} 0
# HELP volcano_vgpu_device_memory_allocation_for_a_certain_pod per pod
# TYPE volcano_vgpu_device_memory_allocation_for_a_certain_pod gauge
volcano_vgpu_device_memory_allocation_for_a_certain_pod{NodeName="rig01",devID="GPU-a0",podName="a"} 1000
volcano_vgpu_device_memory_allocation_for_a_certain_pod{NodeName="rig01",devID="GPU-a0",podName="b"} 500
"""


def test_metric_values_with_prometheus_parser():
    assert smoke.metric_values(METRICS, smoke.CARD_METRIC) == {("GPU-a0", "rig01"): 1500, ("GPU-a1", "rig01"): 0}
    assert smoke.metric_values(METRICS, "volcano_vgpu_device_memory_allocation_for_a_certain_pod") == {
        ("GPU-a0", "rig01"): 1500}


@pytest.mark.parametrize("pods, smoke_names, problems, cards", [
    ([pod("a", "rig01", "GPU-a0,NVIDIA,1000,0:"), pod("b", "rig01", "GPU-a0,NVIDIA,500,0:")], {"a", "b"}, [], 1),
    ([pod("a", "rig01", "GPU-a0,NVIDIA,1000,0:")], {"a"},
     ["card GPU-a0 on rig01: scheduler says 1500, the smoke pods requested 1000"], 1),
    # A card that also holds someone else's pod is not compared.
    ([pod("a", "rig01", "GPU-a0,NVIDIA,1000,0:"), pod("other", "rig01", "GPU-a0,NVIDIA,1,0:")], {"a"}, [], 0),
    ([pod("a", "rig01", "GPU-a9,NVIDIA,10,0:")], {"a"},
     ["card GPU-a9 on rig01: scheduler says nothing, the smoke pods requested 10"], 1),
])
def test_compare_allocated_memory(pods, smoke_names, problems, cards):
    metric = smoke.metric_values(METRICS, smoke.CARD_METRIC)
    assert smoke.compare_allocated_memory(metric, pods, smoke_names) == (problems, cards)


def test_describe_and_markdown():
    class ApiError(Exception):
        status = 503
        body = '{"message": "no endpoints available"}'
    assert smoke.describe(ApiError("x\ny")) == "API error 503: no endpoints available"
    assert smoke.describe(ValueError("first\nsecond")) == "ValueError: first"
    text = smoke.markdown([{"check": "gang", "status": "failed", "detail": "a|b", "seconds": 1.5}], "ns-1")
    assert "| gang | **FAILED** | 1.5 | a\\|b |" in text


@pytest.mark.parametrize("registers, allocations, expected", [
    ([REGISTER], [], {"GPU-a0": {"slots": 2, "memory": 8188}, "GPU-a1": {"slots": 2, "memory": 8188}}),
    ([REGISTER], ["GPU-a0,NVIDIA,3000,0:", "GPU-a0,NVIDIA,1000,0:;GPU-a1,NVIDIA,500,0:"],
     {"GPU-a0": {"slots": 0, "memory": 4188}, "GPU-a1": {"slots": 1, "memory": 7688}}),
    # an unhealthy card offers nothing; allocations on cards not registered are ignored
    (["GPU-x,4,16376,NVIDIA-RTX,false:"], ["GPU-zz,NVIDIA,100,0:"], {}),
    ([None, ""], [None], {}),
])
def test_free_by_gpu(registers, allocations, expected):
    assert cap.free_by_gpu(registers, allocations) == expected


FREE = {"a": {"slots": 1, "memory": 8000}, "b": {"slots": 2, "memory": 6000}}


@pytest.mark.parametrize("requests, fits", [
    ([], True),
    ([8000], True),
    ([8001], False),
    ([3000, 3000, 8000], True),          # largest first onto a; the two 3000 share b
    ([3000, 3000, 3000], True),          # b takes two, a one
    ([3000, 3000, 3000, 100], False),    # four vGPUs, three slots
    ([6000, 6000], True),
    ([6000, 6000, 1], False),
    ([7000, 5000], True),
])
def test_fits(requests, fits):
    assert cap.fits(requests, FREE) is fits
    assert FREE == {"a": {"slots": 1, "memory": 8000}, "b": {"slots": 2, "memory": 6000}}  # input left alone


@pytest.mark.parametrize("free, max_pods, want", [
    ({"rig01": 10, "rig02": 20}, 200, (["rig01", "rig02"], 30, [])),
    ({"rig02": 20, "rig01": 10}, 25, (["rig01"], 10, ["rig02"])),  # name order, the rest named
    ({"rig01": 10, "rig02": 20, "rig03": 5}, 16, (["rig01", "rig03"], 15, ["rig02"])),
    ({"rig01": 0, "rig02": -1, "rig03": 4}, 200, (["rig03"], 4, [])),  # full (or over-held) nodes are not filled
    ({"big": 300}, 200, ([], 0, ["big"])),
    ({}, 200, ([], 0, [])),
])
def test_fill_scope(free, max_pods, want):
    assert smoke.fill_scope(free, max_pods) == want


def test_node_affinity_keeps_pods_on_the_nodes_under_test():
    assert smoke.node_affinity([]) is None
    terms = smoke.node_affinity(["rig02", "rig01"])["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                            "values": ["rig01", "rig02"]}]}]


class FakeCore:
    """The two list calls the scope and free-vGPU accounting make, over plain objects."""

    def __init__(self, nodes, pods):
        self.nodes, self.all_pods = nodes, pods

    def list_node(self):
        return SimpleNamespace(items=self.nodes)

    def list_pod_for_all_namespaces(self):
        return SimpleNamespace(items=self.all_pods)


def k8s_node(name, vgpus):
    return SimpleNamespace(metadata=SimpleNamespace(name=name, annotations={}),
                           status=SimpleNamespace(allocatable={"volcano.sh/vgpu-number": str(vgpus)} if vgpus else {}))


def k8s_pod(node_name, devices, phase="Running"):
    return SimpleNamespace(metadata=SimpleNamespace(annotations={cap.POD_DEVICES: devices}),
                           spec=SimpleNamespace(node_name=node_name), status=SimpleNamespace(phase=phase))


@pytest.mark.parametrize("scope, want", [
    ([], {"rig01": 9, "rig02": 10, "other": 4}),   # no scope: every GPU node
    (["rig01"], {"rig01": 9}),                      # another operator's GPU node is not counted as free
    (["rig02", "other"], {"rig02": 10, "other": 4}),
])
def test_free_by_node_counts_only_the_nodes_under_test(scope, want):
    run = smoke.Smoke.__new__(smoke.Smoke)
    run.scope = scope
    run.params = {"image": "i", "command": ["c"], "scheduler_name": "volcano"}
    run.core = FakeCore([k8s_node("rig01", 10), k8s_node("rig02", 10), k8s_node("other", 8), k8s_node("cp0", 0)],
                        [k8s_pod("rig01", "GPU-a,NVIDIA,10,0:"), k8s_pod("other", "GPU-o,NVIDIA,1,0:GPU-p,NVIDIA,1,0:"),
                         k8s_pod("other", "GPU-o,NVIDIA,1,0:;GPU-o,NVIDIA,1,0:"),
                         k8s_pod("rig02", "GPU-b,NVIDIA,10,0:", phase="Succeeded"), k8s_pod(None, "GPU-c,NVIDIA,1,0:")])
    assert run.free_by_node() == want
    spec = run.pod_spec(10)
    if scope:
        assert spec["affinity"] == smoke.node_affinity(scope)
    else:
        assert "affinity" not in spec


@pytest.mark.parametrize("gpu_nodes, wanted, want", [
    (["rig02", "rig01"], [], (["rig01", "rig02"], [])),            # nothing asked: every GPU node
    (["rig01", "rig02", "other"], ["rig02", "rig01"], (["rig01", "rig02"], [])),
    (["rig01"], ["rig01", "rig03"], (["rig01"], ["rig03"])),        # a node without vGPUs is named
    ([], ["rig01"], ([], ["rig01"])),
])
def test_nodes_under_test(gpu_nodes, wanted, want):
    assert smoke.nodes_under_test(gpu_nodes, wanted) == want
