"""Modules run in-process with their arguments, as Ansible hands them over: what each refuses before it touches
anything, and what it writes (ansible.module_utils.testing.patch_module_args; exit/fail caught as exceptions)."""

import shutil
import subprocess

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.vgpu.plugins.modules import repo_key, vgpu_registration_wait, vgpu_smoke

GPG = shutil.which("gpg") or "gpg"


class Exit(Exception):
    def __init__(self, result, failed):
        super().__init__(result.get("msg", ""))
        self.result, self.failed = result, failed


def run(module, args, check_mode=False):
    """The module's result dict, and whether it failed."""
    def leave(failed):
        def call(self, **result):  # pylint: disable=unused-argument
            raise Exit(result, failed)
        return call
    args = dict(args, _ansible_check_mode=check_mode)
    with patch_module_args(args), \
            pytest.MonkeyPatch.context() as patch:
        patch.setattr(basic.AnsibleModule, "exit_json", leave(False))
        patch.setattr(basic.AnsibleModule, "fail_json", leave(True))
        with pytest.raises(Exit) as caught:
            module.main()
    return caught.value.result, caught.value.failed


# vgpu_smoke: refused before a client is built, then kubernetes.core's client and its messages.
@pytest.mark.parametrize("name", ["vgpu_memory", "fill_memory", "memory_factor", "gang_size", "timeout",
                                  "fill_max_pods"])
def test_vgpu_smoke_refuses_sizes_below_one(name):
    result, failed = run(vgpu_smoke, {name: 0, "kubeconfig": "/nonexistent/kubeconfig"})
    assert failed and result["msg"] == "%s must be an integer >= 1, got 0" % name


def test_vgpu_smoke_builds_kubernetes_cores_client_from_its_auth_options(tmp_path):
    """A kubeconfig that is not there fails in kubernetes.core's client, with its message: the module has no client
    code of its own left."""
    result, failed = run(vgpu_smoke, {"kubeconfig": str(tmp_path / "missing")})
    assert failed and result["msg"].startswith("Could not create API client"), result


def test_vgpu_smoke_refuses_an_unknown_option():
    result, failed = run(vgpu_smoke, {"kubeconfig_path_typo": "/root/.kube/config"})
    assert failed and "kubeconfig_path_typo" in result["msg"]


# vgpu_registration_wait: its own options refused before a client is built; the client is kubernetes.core's.
WAIT = {"expected": {}, "kubeconfig": "/nonexistent/kubeconfig"}


@pytest.mark.parametrize("args, message", [
    ({"delay": 0}, "timeout must be >= 0, delay and status_period >= 1, got 300, 0 and 10"),
    ({"timeout": -1}, "timeout must be >= 0, delay and status_period >= 1, got -1, 5 and 10"),
    ({"status_period": 0}, "timeout must be >= 0, delay and status_period >= 1, got 300, 5 and 0"),
    ({"daemonsets": ["volcano-device-plugin"]}, "daemonsets ['volcano-device-plugin'] need namespace (the plugin's)"),
])
def test_vgpu_registration_wait_refuses_bad_options_before_any_listing(args, message):
    result, failed = run(vgpu_registration_wait, dict(WAIT, **args))
    assert failed and (result["msg"], result["polls"]) == (message, 0)


def test_vgpu_registration_wait_needs_expected_and_integers():
    result, failed = run(vgpu_registration_wait, {"kubeconfig": "/k"})
    assert failed and "missing required arguments: expected" in result["msg"]
    result, failed = run(vgpu_registration_wait, dict(WAIT, timeout="soon"))
    assert failed and "timeout" in result["msg"] and "int" in result["msg"]


def test_vgpu_registration_wait_builds_kubernetes_cores_client(tmp_path):
    result, failed = run(vgpu_registration_wait, dict(WAIT, kubeconfig=str(tmp_path / "missing")))
    assert failed and result["msg"].startswith("Could not create API client") and result["polls"] == 0, result


# repo_key: a key is installed only when its fingerprint is pinned.
@pytest.fixture(scope="module")
def key(tmp_path_factory):
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)

    def gpg(*args):
        return subprocess.run([GPG, "--homedir", str(home), "--batch", "--quiet", "--passphrase", ""] + list(args),
                              check=True, capture_output=True).stdout
    gpg("--quick-generate-key", "repo <repo@gpufleet.invalid>", "ed25519", "sign", "never")
    colons = gpg("--with-colons", "--list-keys", "repo@gpufleet.invalid").decode()
    fpr = [line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:")][0]
    path = tmp_path_factory.mktemp("repo") / "key.asc"
    path.write_bytes(gpg("--armor", "--export", fpr))
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False)
    return {"fpr": fpr, "url": "file://%s" % path}


def test_repo_key_installs_a_pinned_key_once(key, tmp_path):
    dest = tmp_path / "keyrings" / "repo.asc"
    args = {"url": key["url"], "dest": str(dest), "fingerprints": [key["fpr"]]}
    result, failed = run(repo_key, args, check_mode=True)
    assert not failed and result["changed"] and not dest.exists()
    result, failed = run(repo_key, args)
    assert not failed and result["changed"] and result["fingerprints"] == [key["fpr"]]
    assert oct(dest.stat().st_mode & 0o777) == "0o644"
    result, failed = run(repo_key, args)
    assert not failed and not result["changed"]


def test_repo_key_refuses_a_key_whose_fingerprint_is_not_pinned(key, tmp_path):
    dest = tmp_path / "repo.asc"
    dest.write_text("the key installed before\n")
    other = "0123456789ABCDEF0123456789ABCDEF01234567"
    result, failed = run(repo_key, {"url": key["url"], "dest": str(dest), "fingerprints": [other]})
    assert failed and "was not installed" in result["msg"] and result["fingerprints"] == [key["fpr"]]
    assert dest.read_text() == "the key installed before\n"


@pytest.mark.parametrize("fingerprints, mode, message", [
    (["DEADBEEF"], "0644", "fingerprints must be full key fingerprints"),
    ([], "0644", "fingerprints must be full key fingerprints"),
    (None, "u=rw", "mode must be an octal mode such as 0644, got 'u=rw'"),
])
def test_repo_key_refuses_bad_arguments(key, tmp_path, fingerprints, mode, message):
    dest = tmp_path / "repo.asc"
    args = {"url": key["url"], "dest": str(dest), "mode": mode,
            "fingerprints": [key["fpr"]] if fingerprints is None else fingerprints}
    result, failed = run(repo_key, args)
    assert failed and message in result["msg"], result
    assert not dest.exists()
