"""Pinned repository key fingerprints: a key ID or a malformed value is refused with a message naming the variable,
before any change; gpg's spaced form is accepted."""

import json

import pytest

from helpers import ROOT, failed_messages, run_playbook

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "node_roles_validate.yml"
SPACED = "C95B 321B 61E8 8C18 09C4  F759 DDCA E044 F796 ECB0"
CHECKS = {"container_runtime": ("container_runtime_repo_key_fingerprints", "Check the role's settings"),
          "nvidia_driver": ("nvidia_driver_cuda_repo_key_fingerprints", "Check the role's settings")}


def run(tmp_path, role, value):
    variable = CHECKS[role][0]
    varfile = tmp_path / "vars.json"
    varfile.write_text(json.dumps({"role_under_test": role, variable: value}))
    return run_playbook(PLAYBOOK, "-e", "@%s" % varfile)


def check_result(out, role):
    return [r for play in out["plays"] for task in play["tasks"] if task["task"]["name"].endswith(CHECKS[role][1])
            for r in task["hosts"].values()]


@pytest.mark.parametrize("role", sorted(CHECKS))
@pytest.mark.parametrize("value", [["DDCAE044F796ECB0"], ["F796ECB0"], ["not-a-fingerprint"],
                                   [SPACED.replace("C95B", "X95B")]])
def test_bad_fingerprints_are_refused_naming_the_variable(tmp_path, role, value):
    rc, out, dummy = run(tmp_path, role, value)
    assert rc != 0
    messages = failed_messages(out)
    assert messages and CHECKS[role][0] in messages[0] and value[0] in messages[0], messages
    assert out["stats"]["localhost"]["changed"] == 0


@pytest.mark.parametrize("role", sorted(CHECKS))
def test_gpgs_spaced_fingerprint_is_accepted(tmp_path, role):
    dummy, out, err = run(tmp_path, role, [SPACED, SPACED.lower().replace(" ", "")])
    results = check_result(out, role)
    assert results and not results[0].get("failed"), (results, failed_messages(out), err[-1500:])
