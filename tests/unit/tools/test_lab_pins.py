"""The lab runs exactly what the roles deploy by default: the Volcano and plugin versions built from the lab's Go
modules are the roles' default chart, image tags and plugin version."""

import pathlib

import yaml

from gpufleet_lab import images

ROOT = pathlib.Path(__file__).resolve().parents[3]


def module_version(group, module):
    for line in (ROOT / "tools" / "lab" / group / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:2] == ["require", module] or parts[:1] == [module]:
            return parts[-1]
    raise AssertionError("%s not in tools/lab/%s/go.mod" % (module, group))


def defaults(role):
    return yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())


def test_volcano_role_deploys_the_version_the_lab_builds():
    built = module_version("volcano", "volcano.sh/volcano")
    role = defaults("volcano")
    assert role["volcano_image_tag"] == built
    assert "v" + role["volcano_chart_version"] == built


def test_device_plugin_role_deploys_the_version_the_lab_builds():
    assert defaults("device_plugin")["device_plugin_version"] == module_version("hami", "volcano.sh/k8s-device-plugin")
    assert images.plugin_version() == defaults("device_plugin")["device_plugin_version"]


def test_lab_inventory_takes_the_versions_from_the_lab():
    group_vars = yaml.safe_load((ROOT / "inventories" / "lab" / "group_vars" / "all.yml").read_text())
    assert "gpufleet_lab.volcano_version" in group_vars["volcano_image_tag"]
    assert "gpufleet_lab.plugin_version" in group_vars["device_plugin_version"]
