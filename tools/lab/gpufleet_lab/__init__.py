"""The local lab: a real Kubernetes control plane on this machine, kwok-simulated nodes, the real Volcano, and on
GPU nodes that are podman test hosts the real vGPU device plugin behind kubelet's own device manager.

Modules, one job each:
    paths      where the lab keeps its state and finds its binaries
    kube       the lab's own API access
    pki        the lab's CA, certificates and kubeconfigs
    serviceaccount  service-account credentials as kubelet hands them to a pod
    procs      processes the lab starts and stops (by PID, by process group)
    cluster    up / down / status: etcd, kube-apiserver, controller-manager, kube-scheduler, kwok, nodes, Volcano
    hosts      GPU nodes as podman test hosts
    netns      network namespaces of the lab's pods and TCP forwarding into and out of them
    images     what the lab runs for a container image it knows (the plugin's binaries built from the pinned module)
    volcano    the controller's part that runs Volcano's Deployments as local processes
    kubelet    the controller's part that is the kubelet of host-backed GPU nodes: device manager and plugin pods
    emulator   the controller's stand-in plugin for GPU nodes without a host (the 1000-node benchmark fleet)
    controller the control loop that drives volcano, kubelet and emulator
"""
