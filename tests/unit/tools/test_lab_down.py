"""'lab.py down' always finishes: a half-removed lab (no state left, a process still running from its folder) is
cleaned up by the next 'down', which stops that process before removing the folder."""

import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_down_after_a_failed_down_stops_leftovers_and_removes_the_folder(tmp_path):
    lab = tmp_path / "lab"
    (lab / "etcd" / "member").mkdir(parents=True)
    # As etcd would, still running from the lab's folder after state.json was already removed.
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", str(lab / "etcd")])
    try:
        env = dict(os.environ, GPUFLEET_LAB_DIR=str(lab))
        done = subprocess.run([sys.executable, str(ROOT / "tools" / "lab" / "lab.py"), "down"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        deadline = time.time() + 5
        while writer.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert writer.poll() is not None, "the leftover process still runs"
        assert not lab.exists()
        again = subprocess.run([sys.executable, str(ROOT / "tools" / "lab" / "lab.py"), "down"], env=env,
                               capture_output=True, text=True, timeout=60, check=False)
        assert again.returncode == 0 and "nothing to stop" in again.stderr + again.stdout
    finally:
        if writer.poll() is None:
            writer.kill()
