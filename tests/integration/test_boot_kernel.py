"""nvidia_driver's kernel choice as the role runs it (tasks/kernel.yml), on GRUB files as grub-mkconfig and
grub-set-default write them on Debian 12: a pinned older kernel is the one that boots, so the role builds for it and
the reboot decision has no kernel reason."""

import json

import pytest

from helpers import ROOT, failed_messages, run_playbook

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "boot_kernel.yml"
GRUB = ROOT / "tests" / "fixtures" / "grub"


def choice(tmp_path, **extra):
    varfile = tmp_path / "vars.json"
    varfile.write_text(json.dumps(dict({"_nvidia_driver_grubby_command": "gpufleet-no-grubby"}, **extra)))
    rc, out, err = run_playbook(PLAYBOOK, "-e", "@%s" % varfile)
    assert rc == 0, (failed_messages(out), err[-2000:])
    [report] = [r["msg"] for play in out["plays"] for task in play["tasks"] if task["task"]["name"] == "Report it"
                for r in task["hosts"].values()]
    return report


@pytest.mark.parametrize("files, kernel_release, boot, target", [
    # grub-set-default pinned the older kernel (GRUB_DEFAULT=saved), a newer one is installed and listed first.
    (["debian12-grub.cfg", "debian12-grubenv-pinned"], "", "6.1.0-18-amd64", "6.1.0-18-amd64"),
    # Nothing saved yet: GRUB boots the first entry, the newest kernel.
    (["debian12-grub.cfg", "missing-grubenv"], "", "6.1.0-28-amd64", "6.1.0-28-amd64"),
    # The inventory names the kernel to build for; what boots next is still GRUB's to say.
    (["debian12-grub.cfg", "debian12-grubenv-pinned"], "6.1.0-30-amd64", "6.1.0-18-amd64", "6.1.0-30-amd64"),
])
def test_the_kernel_that_boots_next_is_the_target(tmp_path, files, kernel_release, boot, target):
    report = choice(tmp_path, _nvidia_driver_grub_files=[str(GRUB / f) for f in files],
                    nvidia_driver_kernel_release=kernel_release)
    assert (report["boot"], report["target"]) == (boot, target), report


def test_without_a_readable_bootloader_the_running_kernel_is_the_target(tmp_path):
    report = choice(tmp_path, _nvidia_driver_grub_files=[str(GRUB / "none.cfg"), str(GRUB / "none.env")])
    assert report["boot"] in (None, "", "None") and report["target"] == report["running"], report
