"""The lab's own API access (the admin kubeconfig of $LAB), for the lab's code; the components it runs use their
own credentials."""

from .paths import LAB


def api():
    from kubernetes import config  # pylint: disable=import-outside-toplevel

    return config.new_client_from_config(str(LAB / "kubeconfig"))


def configmap_text(core, namespace, name, key):
    """One key of a ConfigMap, or None when the ConfigMap or the key does not exist."""
    from kubernetes import client  # pylint: disable=import-outside-toplevel

    try:
        return (core.read_namespaced_config_map(name, namespace).data or {}).get(key)
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return None
        raise
