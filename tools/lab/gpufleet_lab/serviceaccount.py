"""Service-account credentials as kubelet hands them to a pod: a token from the TokenRequest API bound to the pod,
renewed at 80 % of its life, with the cluster's CA and the namespace, under /var/run/secrets/kubernetes.io/
serviceaccount. Clients inside (client-go's in-cluster config; Volcano's device code knows no other) then act with the
pod's own service account and the RBAC the chart or role gave it."""

import shlex
import time

MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def request_token(core, pod, ttl=3607, audience=None):
    spec = {"expirationSeconds": ttl, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                                         "name": pod.metadata.name, "uid": pod.metadata.uid}}
    if audience:
        spec["audiences"] = [audience]
    return core.create_namespaced_service_account_token(pod.spec.service_account_name or "default",
                                                        pod.metadata.namespace, {"spec": spec}).status.token


class Credentials:
    """The files of one pod's service-account volume in a directory of this machine, kept fresh."""

    def __init__(self, directory, ca_file):
        self.directory, self.ca_file = directory, ca_file
        self.pod_uid, self.written, self.ttl = None, 0.0, 3607

    def ensure(self, core, pod):
        """Write or renew the files for `pod`; True when they were (re)written."""
        fresh = pod.metadata.uid == self.pod_uid and time.time() - self.written < 0.8 * self.ttl
        if fresh:
            return False
        self.directory.mkdir(parents=True, exist_ok=True)
        for name, text in (("token", request_token(core, pod, self.ttl)), ("ca.crt", self.ca_file.read_text()),
                           ("namespace", pod.metadata.namespace)):
            tmp = self.directory / (".%s.tmp" % name)
            tmp.write_text(text)
            tmp.chmod(0o600 if name == "token" else 0o644)
            tmp.replace(self.directory / name)
        self.pod_uid, self.written = pod.metadata.uid, time.time()
        return True

    def argv(self):
        """Prefix that runs a command on this machine with these files at the in-cluster path: a private mount
        namespace with a /run of its own (the path is /run/secrets/... through /var/run)."""
        script = ("mount -t tmpfs gpufleet-lab-run /run && mkdir -p %s && mount --bind %s %s && exec \"$@\""
                  % (MOUNT, shlex.quote(str(self.directory)), MOUNT))
        return ["unshare", "-m", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh"]
