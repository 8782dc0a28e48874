"""A Go module of the lab with a series of git patches applied, for `go build -modfile` / `go test -modfile`.

    python3 tools/upstream/patched_module.py GROUP_DIR MODULE PATCH_DIR OUT_DIR     # prints OUT_DIR/go.mod

GROUP_DIR is a lab group (tools/lab/<group>, its own go.mod and go.sum pinning MODULE). The pinned release of MODULE
is copied out of the module cache into OUT_DIR/src (the cache itself stays the pinned bytes: Go refuses overlays of
files under GOMODCACHE), PATCH_DIR/*.patch are applied there in name order with `git apply`, and OUT_DIR/go.mod is
GROUP_DIR's go.mod with `replace MODULE => OUT_DIR/src` (go.sum beside it). Run from GROUP_DIR,
`go build -modfile OUT_DIR/go.mod` builds the group's commands with the patches and everything else as pinned. A
patch that does not apply stops with git's message. OUT_DIR is reused while it was made from the same release and
patches (OUT_DIR/.key).
"""

import hashlib
import pathlib
import shutil
import subprocess
import sys


def key_of(module_dir, patches):
    digest = hashlib.sha256(str(module_dir).encode())
    for patch in patches:
        digest.update(patch.name.encode() + b"\0" + patch.read_bytes())
    return digest.hexdigest()[:16]


def build(group_dir, module, patch_dir, out_dir):
    group_dir, out_dir = pathlib.Path(group_dir).resolve(), pathlib.Path(out_dir).resolve()
    module_dir = pathlib.Path(subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=group_dir,
                                             capture_output=True, text=True, check=True).stdout.strip())
    if not module_dir.is_dir():
        # `go list -m` names the directory even before the module is downloaded.
        subprocess.run(["go", "mod", "download", module], cwd=group_dir, check=True)
    patches = sorted(pathlib.Path(patch_dir).resolve().glob("*.patch"))
    if not patches:
        raise SystemExit("no *.patch in %s" % patch_dir)
    key = key_of(module_dir, patches)
    modfile = out_dir / "go.mod"
    if (out_dir / ".key").exists() and (out_dir / ".key").read_text() == key and modfile.exists():
        return modfile
    shutil.rmtree(out_dir, ignore_errors=True)
    src = out_dir / "src"
    shutil.copytree(module_dir, src)
    for path in [src] + list(src.rglob("*")):
        path.chmod(path.stat().st_mode | 0o200)  # the module cache's copies are read-only
    for patch in patches:
        result = subprocess.run(["git", "apply", "--whitespace=nowarn", str(patch)], cwd=src,
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise SystemExit("%s does not apply to %s:\n%s" % (patch.name, module_dir.name, result.stderr))
    text = (group_dir / "go.mod").read_text()
    modfile.write_text(text.rstrip("\n") + "\n\n// %s with the patches of %s\nreplace %s => %s\n"
                       % (module_dir.name, pathlib.Path(patch_dir).name, module, src))
    shutil.copyfile(group_dir / "go.sum", out_dir / "go.sum")
    (out_dir / ".key").write_text(key)
    return modfile


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    print(build(*sys.argv[1:]))
