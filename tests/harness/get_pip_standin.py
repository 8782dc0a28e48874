"""Stand-in for ansible-test's pip bootstrap script (get-pip.py).

ansible-test downloads get-pip.py from a CI file host that this machine cannot reach. This script does the
same job with what every venv-capable Python has: ensurepip, then `pip install <the requested pip version>`
from the package index that pip is configured for. sanity.sh puts it where ansible-test caches the download.
"""

import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
subprocess.check_call([sys.executable, "-m", "pip", "install", *args])
