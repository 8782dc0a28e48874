"""tools/docs/role_docs.py: Ansible markup as Markdown, one-line cells, defaults as written, the table between its
markers, and every role README as `make docs` writes it."""

import pathlib

import pytest

import role_docs  # tools/docs, through the virtualenv's paths (make bootstrap)

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("text, markdown", [
    ("C(split) and O(device_plugin_vgpu)", "`split` and `device_plugin_vgpu`"),
    ("V(true) or RV(changed), E(KUBECONFIG)", "`true` or `changed`, `KUBECONFIG`"),
    ("I(on the node) and B(never)", "*on the node* and **never**"),
    ("see L(the docs, https://example.org/x) or U(https://example.org)",
     "see [the docs](https://example.org/x) or <https://example.org>"),
    ("C({name, arguments}) keeps braces", "`{name, arguments}` keeps braces"),
    ("C(defaults(main)) nests one level", "`defaults(main)` nests one level"),
    ("plain (parenthesised) text", "plain (parenthesised) text"),
])
def test_markup(text, markdown):
    assert role_docs.markup(text) == markdown


@pytest.mark.parametrize("text, cell", [
    ("a\n  b", "a b"),
    ("x | y", "x \\| y"),
])
def test_cell(text, cell):
    assert role_docs.cell(text) == cell


@pytest.mark.parametrize("value, required, shown", [
    (role_docs.ABSENT, False, ""),
    (role_docs.ABSENT, True, "*required*"),
    ("", False, '`""`'),
    ("{{ groups['gpu_nodes'] }}", False, "`{{ groups['gpu_nodes'] }}`"),
    (True, False, "`true`"),
    (20, False, "`20`"),
    ([], False, "`[]`"),
    ({"gpufleet.io/gpu": "true"}, False, "`{gpufleet.io/gpu: 'true'}`"),
])
def test_show_default(value, required, shown):
    assert role_docs.show_default(value, required) == shown


def write_role(tmp_path, readme):
    role = tmp_path / "r"
    (role / "meta").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "meta" / "argument_specs.yml").write_text("""
argument_specs:
  main:
    options:
      r_split: {type: int, default: 2, description: [vGPUs per GPU., 1 to 100.]}
      r_hosts: {type: list, elements: str, description: The hosts. Default C(gpu_nodes).}
      r_vgpu:
        type: dict
        description: Settings.
        options:
          mode: {type: str, default: hami-core, choices: [hami-core, mig], description: Mode.}
  uncordon:
    options:
      r_split: {type: int, default: 2, description: Same option, listed once.}
      r_node: {type: str, required: true, description: The node.}
""")
    (role / "defaults" / "main.yml").write_text("r_hosts: \"{{ groups['gpu_nodes'] }}\"\n")
    (role / "README.md").write_text(readme)
    return role


def test_table_lists_every_entry_point_once_with_suboptions(tmp_path):
    role = write_role(tmp_path, "")
    assert role_docs.table(role).splitlines() == [
        "| variable | type | default | description |",
        "|---|---|---|---|",
        "| `r_split` | int | `2` | vGPUs per GPU. 1 to 100. |",
        "| `r_hosts` | list of str | `{{ groups['gpu_nodes'] }}` | The hosts. Default `gpu_nodes`. |",
        "| `r_vgpu` | dict |  | Settings. |",
        "| `r_vgpu.mode` | str | `hami-core` | Mode. One of: `hami-core`, `mig`. |",
        "| `r_node` | str | *required* | The node. (entry point `uncordon`) |",
    ]


def test_check_reports_a_stale_table_and_make_docs_writes_it(tmp_path, capsys):
    role = write_role(tmp_path, "# r\n\n%s\n| old | table |\n%s\n\nAfter.\n" % (role_docs.BEGIN, role_docs.END))
    before = (role / "README.md").read_text()
    assert role_docs.main(["--check", str(role)]) == 1
    assert "| old | table |" in capsys.readouterr().err and (role / "README.md").read_text() == before
    assert role_docs.main([str(role)]) == 0
    written = (role / "README.md").read_text()
    assert "| old | table |" not in written and "| `r_node` |" in written and written.endswith("\n\nAfter.\n")
    assert role_docs.main(["--check", str(role)]) == 0


def test_a_readme_without_markers_is_an_error(tmp_path, capsys):
    role = write_role(tmp_path, "# r\n| `r_split` | 2 |\n")
    assert role_docs.main(["--check", str(role)]) == 1
    assert "no <!-- BEGIN VARIABLES" in capsys.readouterr().err


@pytest.mark.parametrize("role", sorted(p.parent.parent for p in (ROOT / "roles").glob("*/meta/argument_specs.yml")),
                         ids=lambda p: p.name)
def test_every_role_readme_is_current(role):
    readme = (role / "README.md").read_text()
    assert role_docs.render(readme, role_docs.table(role)) == readme, "run `make docs`"
