#!/usr/bin/env bash
# ansible-test needs the collection at .../ansible_collections/<namespace>/<name>; a symlink is resolved away,
# so sanity runs on a copy of the tracked (and untracked, not ignored) files.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dest="$root/.build/sanity/ansible_collections/gpufleet/vgpu"
rm -rf "$root/.build/sanity"
mkdir -p "$dest"
cd "$root"
at=$(python -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')
pip_version=$(grep -oP "pip='\K[0-9.]+" "$at/_internal/python_requirements.py" | head -n1)
get_pip="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
[ -f "$get_pip" ] || install -D -m 0644 "$root/tests/harness/get_pip_standin.py" "$get_pip"
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf - | tar -C "$dest" -xf -
# kubernetes.core beside it, as ansible-test finds a collection's dependencies: vgpu_smoke imports its client and
# auth options and extends its documentation fragment (the copy bundled by the pinned ansible package).
kc=$(python -c 'import pathlib, ansible_collections.kubernetes.core.plugins as p; print(pathlib.Path(p.__path__[0]).parent)')
mkdir -p "$root/.build/sanity/ansible_collections/kubernetes"
cp -r "$kc" "$root/.build/sanity/ansible_collections/kubernetes/core"
cd "$dest"
# The copy lives inside the repo's ignored .build/: give it its own git index, or ansible-test (which lists
# files through git) sees every file as ignored and skips all targets.
git init -q . && git add -A
# --venv: ansible-test installs each sanity test's own pinned requirements into cached venvs.
exec ansible-test sanity --venv --python "$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
  --color no --requirements "$@"
