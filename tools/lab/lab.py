"""The local lab: a real Kubernetes control plane on this machine with kwok-simulated nodes, the real Volcano, and
on GPU nodes that are podman test hosts the real vGPU device plugin behind kubelet's own device manager.

    python tools/lab/lab.py up [--nodes FILE] [--bare] [--no-hosts] [--no-prometheus] [--volcano-fix]
                               [--plugin-register periodic|on-change]
        build (cached) and start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok; create the
        nodes; start the GPU nodes' podman hosts and the lab controller; install Volcano's chart from its Go module
        (not with --bare); print the kubeconfig and kubectl
    python tools/lab/lab.py down      stop every process the lab started (by PID) and remove its state
    python tools/lab/lab.py status    what runs
    python tools/lab/lab.py set plugin-register=periodic|on-change     change a lab option of the running lab
    python tools/lab/lab.py controller   (started by up) runs what the cluster describes: Volcano's Deployments,
        the kubelet parts of host-backed GPU nodes, the stand-in plugin of the others

State (PKI, etcd data, kubeconfig, logs, PIDs) lives in $GPUFLEET_LAB_DIR (default $GPUFLEET_CACHE/lab). Nodes come
from a YAML file (default tools/lab/nodes.yml, the article's cluster). The code is the package gpufleet_lab beside
this file (see its __init__.py for the modules); tools/lab/README.md describes the lab.
"""

import argparse
import pathlib
import sys

# the package beside this script (its directory is sys.path[0])
from gpufleet_lab import cluster, controller, images


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("--nodes", default=str(pathlib.Path(__file__).resolve().parent / "nodes.yml"))
    p_up.add_argument("--bare", action="store_true", help="do not install Volcano (the volcano role will)")
    p_up.add_argument("--no-hosts", action="store_true", help="GPU nodes only in the cluster, not as podman hosts")
    p_up.add_argument("--no-prometheus", action="store_true", help="without the lab's Prometheus (the benchmarks)")
    p_up.add_argument("--volcano-fix", action="store_true",
                      help="also build Volcano's scheduler with tools/upstream/volcano's patches and run it for the "
                           "image tag <version>%s (off: only the stock release runs)" % images.VOLCANO_FIX_SUFFIX)
    p_up.add_argument("--plugin-register", choices=cluster.PLUGIN_REGISTER, default="periodic",
                      help="how the stand-in plugin of GPU nodes without a host writes its Node: periodic, every "
                           "30 s as v1.12.0 does (default), or on-change, only when its registration changed, as "
                           "the plugin's main branch does")
    p_set = sub.add_parser("set")
    p_set.add_argument("option", help="plugin-register=periodic|on-change")
    sub.add_parser("down")
    sub.add_parser("status")
    sub.add_parser("controller")
    args = parser.parse_args(argv)
    if args.cmd == "controller":
        controller.Controller().run()
        return 0
    return {"up": cluster.up, "down": cluster.down, "status": cluster.status,
            "set": cluster.set_option}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
