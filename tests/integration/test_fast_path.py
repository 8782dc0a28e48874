"""Action gpufleet.vgpu.fast_path in a role of the test's: its digest covers the role's options (and only those),
the node facts and the code, and its verdict reads the gpufleet_state local fact as fact gathering returns it. The
fact here is a script in a fact_path of the test's, which setup runs as it runs the one node_state installs."""

import json
import textwrap

import pytest

from helpers import run_playbook

ROLE = {
    "meta/argument_specs.yml": """\
        argument_specs:
          main:
            short_description: A node role with a fast path.
            options:
              r_a: {type: int, default: 1, description: An input.}
              r_b: {type: str, default: "", description: An input given by a template.}
              r_fast_path: {type: bool, default: true, description: The switch.}
        """,
    "defaults/main.yml": """\
        r_a: 1
        r_b: "{{ r_a * 10 }}"
        r_fast_path: true
        """,
    "tasks/main.yml": """\
        - name: Fast path
          gpufleet.vgpu.fast_path:
            enabled: "{{ r_fast_path }}"
          register: r_fast
        """,
}
PLAYBOOK = """\
- name: Fast path in a role
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Gather the facts the fast path reads
      ansible.builtin.setup:
        gather_subset: [local, date_time, distribution, platform, virtual]
        fact_path: "{{ playbook_dir }}/facts.d"
    - name: The role
      ansible.builtin.include_role:
        name: r
"""


@pytest.fixture()
def project(tmp_path):
    for path, text in ROLE.items():
        target = tmp_path / "roles" / "r" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("---\n" + textwrap.dedent(text))
    (tmp_path / "facts.d").mkdir()
    (tmp_path / "site.yml").write_text("---\n" + PLAYBOOK)
    return tmp_path


def state_fact(project, stamps):
    """The local fact as node_state's script reports it: {role: {digest, intact, drift, data}}."""
    script = project / "facts.d" / "gpufleet_state.fact"
    script.write_text("#!/bin/sh\ncat <<'EOF'\n%s\nEOF\n" % json.dumps(stamps))
    script.chmod(0o755)


def fast_path_result(out):
    [task] = [t for t in out["plays"][0]["tasks"] if t["task"]["name"] == "r : Fast path"]
    return task["hosts"]["localhost"]


def decide(project, *args):
    rc, out, err = run_playbook(project / "site.yml", *args)
    assert rc == 0, (out["plays"][0]["tasks"][-1], err[-2000:])
    return fast_path_result(out)


def test_the_verdict_follows_the_stamp_options_and_code(project):
    state_fact(project, {})
    first = decide(project)
    assert (first["converged"], first["reason"]) == (False, "no state recorded yet")
    assert first["msg"] == "localhost: running every task: no state recorded yet"
    digest = first["digest"]

    state_fact(project, {"r": {"digest": digest, "intact": True, "drift": [], "data": {}}})
    again = decide(project)
    assert again["converged"] is True and again["digest"] == digest
    assert again["msg"] == "localhost: skipping every task: unchanged since the last run"
    # A variable with the role's prefix that is not one of its options (an output, say) is no input.
    assert decide(project, "-e", "r_output=whatever")["converged"] is True
    # The switch is no input either: turning it off and on again does not cost a full run.
    off = decide(project, "-e", "r_fast_path=false")
    assert (off["converged"], off["reason"], off["digest"]) == (False, "the fast path is off", digest)

    # An option, also one that only changes through the template of another, changes the digest.
    assert decide(project, "-e", "r_b=other")["digest"] != digest
    changed = decide(project, "-e", "r_a=2")
    assert changed["converged"] is False and "the inputs differ from the last run" in changed["reason"]

    # So does the role's code; its documentation does not.
    (project / "roles" / "r" / "README.md").write_text("# r\n")
    assert decide(project)["digest"] == digest
    (project / "roles" / "r" / "tasks" / "extra.yml").write_text("---\n[]\n")
    assert decide(project)["digest"] != digest


def test_drift_on_the_node_runs_the_role(project):
    state_fact(project, {})
    digest = decide(project)["digest"]
    state_fact(project, {"r": {"digest": digest, "intact": False, "drift": ["tree /etc/containerd changed"],
                               "data": {}}})
    result = decide(project)
    assert (result["converged"], result["reason"]) == (False, "changed on the node: tree /etc/containerd changed")


def test_a_task_outside_a_role_fails_clearly(project):
    (project / "bare.yml").write_text("---\n- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                                      "    - name: Not in a role\n      gpufleet.vgpu.fast_path: {}\n")
    rc, out, err = run_playbook(project / "bare.yml")
    assert rc != 0, err
    assert "fast_path runs inside a node role" in out["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
