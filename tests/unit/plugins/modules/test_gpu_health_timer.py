"""gpu_health_timer's run=true: what it asks systemd, for each state the timer can be found in."""

import pytest
from ansible_collections.gpufleet.vgpu.plugins.modules import gpu_health_timer

UNIT = "gpufleet-gpu-health.timer"


class Failed(Exception):
    pass


class FakeModule:
    """systemctl as a node would answer it: is-enabled / is-active exit 0 when the timer is."""

    def __init__(self, enabled, active, check_mode=False):
        self.state = {"is-enabled": enabled, "is-active": active}
        self.check_mode = check_mode
        self.calls = []

    def get_bin_path(self, name):
        return "/usr/bin/" + name

    def run_command(self, args, check_rc=False):
        verb = args[1]
        self.calls.append(verb)
        if verb in self.state:
            return (0 if self.state[verb] else 1), "", ""
        return 0, "", ""

    def fail_json(self, **kwargs):
        raise Failed(kwargs["msg"])


@pytest.fixture(autouse=True)
def booted(monkeypatch):
    real = gpu_health_timer.os.path.isdir
    monkeypatch.setattr(gpu_health_timer.os.path, "isdir",
                        lambda path: True if path == "/run/systemd/system" else real(path))


# (enabled, active, files changed, unit files changed, check mode) -> (action, systemctl verbs run)
CASES = [
    ((True, True, False, False, False), ("unchanged", ["is-enabled", "is-active"])),
    ((True, False, False, False, False), ("started", ["is-enabled", "is-active", "enable", "start"])),
    ((False, True, False, False, False), ("started", ["is-enabled", "is-active", "enable", "start"])),
    ((True, True, True, False, False), ("restarted", ["enable", "restart"])),
    ((True, True, True, True, False), ("restarted", ["daemon-reload", "enable", "restart"])),
    ((False, False, False, False, True), ("started", ["is-enabled", "is-active"])),
    ((True, True, True, True, True), ("restarted", [])),
]


@pytest.mark.parametrize("found, expected", CASES, ids=[str(case[0]) for case in CASES])
def test_run_timer_does_only_what_the_found_state_needs(found, expected):
    enabled, active, changed, units_changed, check_mode = found
    module = FakeModule(enabled, active, check_mode)
    action = gpu_health_timer.run_timer(module, UNIT, changed, units_changed)
    assert (action, module.calls) == expected


def test_run_timer_refuses_a_system_systemd_does_not_run(monkeypatch):
    monkeypatch.setattr(gpu_health_timer.os.path, "isdir", lambda path: False)
    with pytest.raises(Failed, match="run=true needs systemd"):
        gpu_health_timer.run_timer(FakeModule(True, True), UNIT, False, False)
