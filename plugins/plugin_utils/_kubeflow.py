# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Kubeflow's training-operator as its release manifests define it: where its gang-scheduler flag goes; and Kubeflow
Trainer v2, whose runtimes choose their gang scheduler each (spec.podGroupPolicy). Pure."""

from __future__ import annotations

FLAG = "--gang-scheduler-name"


def _flag_value(words):
    """The flag's value in a command or args list (--flag=value, or --flag value), or None."""
    words = [str(w) for w in words or []]
    for index, word in enumerate(words):
        for spelling in (FLAG, FLAG[1:]):  # Go's flag package takes -flag and --flag alike
            if word.startswith(spelling + "="):
                return word.split("=", 1)[1]
            if word == spelling and index + 1 < len(words):
                return words[index + 1]
    return None


def gang_patch(deployment, scheduler="volcano", container="training-operator"):
    """{"patch": JSON-patch ops, "current": the flag's value or None, "container": its index} for the
    training-operator Deployment ``deployment`` (a k8s_info resource).

    The manager container is the one named ``container``, else the only one. Its release manifests start it with
    ``command: [/manager]`` and no ``args`` (v1.7 and later), older ones with ``args``: the flag is appended to the
    args that exist, or becomes the args; a flag already set (in command or args) is left as it is - to another
    scheduler it is another operator's choice, which ``current`` reports.
    """
    containers = (((deployment or {}).get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
    named = [i for i, c in enumerate(containers) if c.get("name") == container]
    if not named and len(containers) != 1:
        raise ValueError("the Deployment has no container named %r and %d containers; set "
                         "device_plugin_kubeflow_container" % (container, len(containers)))
    index = named[0] if named else 0
    manager = containers[index]
    current = _flag_value(list(manager.get("command") or []) + list(manager.get("args") or []))
    result = {"patch": [], "current": current, "container": index}
    if current is not None:
        return result
    path = "/spec/template/spec/containers/%d/args" % index
    value = "%s=%s" % (FLAG, scheduler)
    result["patch"] = ([{"op": "add", "path": path + "/-", "value": value}] if manager.get("args") is not None
                       else [{"op": "add", "path": path, "value": [value]}])
    return result


TRAINER_API = "trainer.kubeflow.org/v1alpha1"
TRAINER_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")


def trainer_runtimes(runtimes, scheduler="volcano"):
    """{"volcano": names, "other": ["name (policy)"], "none": names} of Kubeflow Trainer v2 runtimes (k8s_info
    resources of ClusterTrainingRuntime and TrainingRuntime, trainer.kubeflow.org/v1alpha1).

    Trainer v2 has no controller flag: each runtime's spec.podGroupPolicy names the gang plugin (``volcano: {}``,
    ``coscheduling: {...}``) and a runtime without one creates no PodGroup, so its TrainJobs are not gang-scheduled
    (pkg/apis/trainer/v1alpha1/trainingruntime_types.go). A namespaced runtime is named namespace/name.
    """
    found = {"volcano": [], "other": [], "none": []}
    for runtime in runtimes or []:
        meta = runtime.get("metadata") or {}
        name = ("%s/%s" % (meta["namespace"], meta.get("name")) if meta.get("namespace") else meta.get("name", "?"))
        policy = ((runtime.get("spec") or {}).get("podGroupPolicy") or {})
        plugins = sorted(key for key, value in policy.items() if value is not None)
        if scheduler in plugins:
            found["volcano"].append(name)
        elif plugins:
            found["other"].append("%s (%s)" % (name, ", ".join(plugins)))
        else:
            found["none"].append(name)
    return {key: sorted(names) for key, names in found.items()}
