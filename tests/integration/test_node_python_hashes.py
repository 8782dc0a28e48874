"""node_python installs only the archives whose hashes are pinned: a wheelhouse (or mirror) that serves a different
wheel under the pinned name and version is refused by pip, and nothing of it lands in the virtualenv.

Runs the role on the controller itself with a virtualenv under tmp_path and an offline wheelhouse of impostor
wheels - valid wheels that pip installs when no hash is pinned (the test shows that too)."""

import base64
import hashlib
import json
import subprocess
import sys
import zipfile


from helpers import ROOT, failed_messages, run_playbook

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "node_python.yml"


def impostor_wheel(directory, dist, module, version):
    """A well-formed wheel named like the real one, with other content."""
    path = directory / ("%s-%s-py3-none-any.whl" % (dist, version))
    info = "%s-%s.dist-info" % (dist, version)
    files = {"%s/__init__.py" % module: b"IMPOSTOR = True\n",
             info + "/METADATA": ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (dist, version)).encode(),
             info + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: gpufleet-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return path


def test_a_wheel_whose_hash_is_not_pinned_is_refused(tmp_path):
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    impostor_wheel(wheelhouse, "nvidia_ml_py", "pynvml", "13.615.71")
    impostor_wheel(wheelhouse, "tomlkit", "tomlkit", "0.15.2")
    venv = tmp_path / "venv"
    extra = {"node_python_venv_path": str(venv), "node_python_wheelhouse": str(wheelhouse),
             "node_python_system_python": sys.executable, "node_python_install_os_packages": False,
             "node_python_fast_path": False}
    varfile = tmp_path / "vars.json"
    varfile.write_text(json.dumps(extra))
    # The run stops at pip, before the role's local fact and state record would write to this machine's /etc.
    rc, out, err = run_playbook(PLAYBOOK, "-e", "@%s" % varfile)
    assert rc != 0
    messages = " ".join(failed_messages(out))
    assert "DO NOT MATCH THE HASHES" in messages, (messages, err[-2000:])
    installed = sorted(p.name for p in venv.glob("lib/python*/site-packages/*.dist-info"))
    assert not [name for name in installed if name.startswith(("tomlkit", "nvidia_ml_py"))], installed
    # The impostors are installable wheels: without the pinned hashes pip takes them.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
                    str(wheelhouse), "tomlkit==0.15.2"], check=True)
    assert (next(venv.glob("lib/python*/site-packages/tomlkit/__init__.py"))).read_text() == "IMPOSTOR = True\n"
