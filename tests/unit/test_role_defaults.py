"""Each default has one source, the role's defaults file: an argument spec either leaves a default out (its
description says it in words) or states exactly the defaults file's value (a template as written there), and every
default is an option."""

import pathlib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROLES = sorted(p.parent.parent.name for p in ROOT.glob("roles/*/meta/argument_specs.yml"))


@pytest.mark.parametrize("role", ROLES)
def test_the_spec_states_the_defaults_files_values(role):
    options = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())[
        "argument_specs"]["main"]["options"]
    path = ROOT / "roles" / role / "defaults" / "main.yml"
    defaults = yaml.safe_load(path.read_text()) if path.exists() else {}
    assert not set(defaults) - set(options), "defaults without an option: %s" % sorted(set(defaults) - set(options))
    for name, spec in options.items():
        if "default" not in spec:
            continue
        assert name in defaults, "%s: a spec default the role does not have" % name
        assert spec["default"] == defaults[name], name
