#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: repo_key
short_description: Install a package repository's signing key only when its fingerprint is the pinned one
version_added: 0.1.0
description:
  - Downloads an OpenPGP public key file (C(https://), C(http://) or C(file://) for mirrors and air-gapped sites),
    reads the fingerprint of every primary key in it, and writes it to O(dest) only when each one is in
    O(fingerprints). A key that is not pinned - a rotated key, a compromised mirror, a key appended to the file -
    fails the task naming what was found and what is allowed, and the key already in O(dest) stays as it was.
  - This replaces trust on first download. apt (C(Signed-By)) and dnf (C(gpgkey=file://)) then verify the
    repository's metadata and packages with the pinned key.
  - In check mode the key is still downloaded and checked (read-only); nothing is written.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.vgpu.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  url:
    description: Where the key file is. Point it at a mirror on air-gapped sites; the fingerprint still has to match.
    type: str
    required: true
  dest:
    description: Where the key file goes on the node (for example C(/etc/apt/keyrings/name.asc)); a missing parent
      directory is created (mode 0755).
    type: path
    required: true
  fingerprints:
    description:
      - Full fingerprints (40 hex digits for v4 keys, 64 for v6; spaces as gpg prints them are allowed) that the
        file's primary keys may have. Key IDs are not accepted.
    type: list
    elements: str
    required: true
  mode:
    description: Mode of O(dest), in octal.
    type: str
    default: "0644"
  validate_certs:
    description: Verify the server's TLS certificate.
    type: bool
    default: true
  timeout:
    description: Seconds to wait for the download.
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: NVIDIA Container Toolkit repository key, pinned
  gpufleet.vgpu.repo_key:
    url: https://nvidia.github.io/libnvidia-container/gpgkey
    dest: /etc/apt/keyrings/nvidia-container-toolkit.asc
    fingerprints: [C95B321B61E88C1809C4F759DDCAE044F796ECB0]
"""

RETURN = r"""
fingerprints:
  description: Fingerprints of the primary keys in the downloaded file.
  returned: always
  type: list
  elements: str
  sample: [C95B321B61E88C1809C4F759DDCAE044F796ECB0]
dest:
  description: The key file on the node.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _atomic as atomic
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _openpgp as pgp


def download(module, url):
    response, info = fetch_url(module, url, timeout=module.params["timeout"])
    # file:// answers carry no HTTP status (get_url makes the same exception).
    if response is None or (info.get("status") != 200 and not url.startswith("file:/")):
        module.fail_json(msg="could not download the key from %s: %s" % (url, info.get("msg", "no answer")),
                         status=info.get("status"))
    return response.read()


def main():
    module = AnsibleModule(argument_spec={
        "url": {"type": "str", "required": True},
        "dest": {"type": "path", "required": True},
        "fingerprints": {"type": "list", "elements": "str", "required": True},
        "mode": {"type": "str", "default": "0644"},
        "validate_certs": {"type": "bool", "default": True},
        "timeout": {"type": "int", "default": 30},
    }, supports_check_mode=True)
    params = module.params
    bad = [f for f in params["fingerprints"] if not pgp.valid_fingerprint(f)]
    if bad or not params["fingerprints"]:
        module.fail_json(msg="fingerprints must be full key fingerprints (40 or 64 hex digits), got %r"
                         % (bad or params["fingerprints"]))
    data = download(module, params["url"])
    have, problem = pgp.judge(data, params["fingerprints"])
    if problem:
        module.fail_json(msg="the key from %s was not installed: %s. If the repository really rotated its key, check "
                             "the new fingerprint with its publisher and pin it." % (params["url"], problem),
                         fingerprints=have)
    try:
        mode = int(params["mode"], 8)
    except ValueError:
        module.fail_json(msg="mode must be an octal mode such as 0644, got %r" % params["mode"])
    changed = atomic.write_if_different(module, params["dest"], data, mode)
    module.exit_json(changed=changed, fingerprints=have, dest=params["dest"])


if __name__ == "__main__":
    main()
