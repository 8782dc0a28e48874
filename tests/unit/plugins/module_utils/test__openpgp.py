"""Table tests for the repository-key fingerprints, checked against gpg's own answer for keys it generates."""

import base64
import shutil
import subprocess

import pytest

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _openpgp as pgp

# gpg is a test dependency (tests/harness/install-deps.sh): these tests fail, not skip, without it.
GPG = shutil.which("gpg") or "gpg"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Two throwaway signing keys (RSA with a subkey, Ed25519), armored and binary, with gpg's fingerprints."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)

    def gpg(*args, **kw):
        return subprocess.run([GPG, "--homedir", str(home), "--batch", "--quiet", "--passphrase", ""] + list(args),
                              check=True, capture_output=True, **kw).stdout
    out = {}
    for name, algo in (("rsa", "rsa2048"), ("ed", "ed25519")):
        gpg("--quick-generate-key", "%s <%s@gpufleet.invalid>" % (name, name), algo, "sign", "never")
        colons = gpg("--with-colons", "--list-keys", "%s@gpufleet.invalid" % name).decode()
        fpr = [line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:")][0]
        if name == "rsa":
            gpg("--quick-add-key", fpr, "rsa2048", "encr", "never")
        out[name] = {"fpr": fpr, "armored": gpg("--armor", "--export", fpr), "binary": gpg("--export", fpr)}
    out["secret"] = gpg("--armor", "--pinentry-mode", "loopback", "--export-secret-keys", out["ed"]["fpr"])
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False)
    return out


@pytest.mark.parametrize("form", ["armored", "binary"])
def test_fingerprints_equal_gpgs(keys, form):
    for name in ("rsa", "ed"):
        # The RSA key carries an encryption subkey: only the primary key is listed.
        assert pgp.primary_fingerprints(keys[name][form]) == [keys[name]["fpr"]]


def test_armor_headers_and_two_keys_in_one_file(keys):
    # NVIDIA's CUDA keys carry a "Version:" armor header; libnvidia-container's file once held two keys.
    armored = keys["rsa"]["armored"].decode().replace(
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\n", "-----BEGIN PGP PUBLIC KEY BLOCK-----\nVersion: GnuPG v2.0.22\n")
    both = (armored + keys["ed"]["armored"].decode()).encode()
    assert pgp.primary_fingerprints(both) == [keys["rsa"]["fpr"], keys["ed"]["fpr"]]


@pytest.mark.parametrize("pinned, problem", [
    (["rsa"], None),
    (["rsa-spaced"], None),           # as gpg prints it: groups of four, any case
    (["ed"], "not pinned"),           # a different key behind the same URL
    (["rsa", "ed"], None),
])
def test_judge(keys, pinned, problem):
    spaced = " ".join(keys["rsa"]["fpr"][i:i + 4] for i in range(0, 40, 4)).lower()
    allowed = [spaced if p == "rsa-spaced" else keys[p]["fpr"] for p in pinned]
    have, why = pgp.judge(keys["rsa"]["armored"], allowed)
    assert have == [keys["rsa"]["fpr"]]
    assert (why is None) if problem is None else problem in why


def test_a_key_appended_to_a_pinned_one_is_refused(keys):
    have, why = pgp.judge(keys["rsa"]["binary"] + keys["ed"]["binary"], [keys["rsa"]["fpr"]])
    assert have == [keys["rsa"]["fpr"], keys["ed"]["fpr"]] and keys["ed"]["fpr"] in why


def test_secret_keys_are_refused(keys):
    have, why = pgp.judge(keys["secret"], [keys["ed"]["fpr"]])
    assert have == [] and "armored block that is not a public key" in why
    binary = base64.b64decode("".join(line for line in keys["secret"].decode().splitlines()
                                      if line and ":" not in line and not line.startswith(("-", "="))))
    assert "secret key" in pgp.judge(binary, [keys["ed"]["fpr"]])[1]


@pytest.mark.parametrize("data, message", [
    (b"", "no public key"),
    (b"<html>404 Not Found</html>", "not a packet header"),   # a mirror's error page
    (bytes([0x99, 0x01]), "truncated"),                           # old format, 2-byte length, cut short
    (bytes([0xC6, 0x05, 0x04, 0x00]), "truncated packet"),      # new format, body shorter than its length
    (bytes([0xC6, 0x03, 0x03, 0x00, 0x00]), "version 3"),         # v3 keys are refused
    (bytes([0xC6, 0xE1]), "partial-length"),
    (b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!notbase64\n-----END PGP PUBLIC KEY BLOCK-----\n", "base64"),
])
def test_unreadable_files_name_the_reason(data, message):
    have, why = pgp.judge(data, ["C95B321B61E88C1809C4F759DDCAE044F796ECB0"])
    assert have == [] and message in why, why


def test_v4_fingerprint_is_the_rfc_hash():
    body = bytes([4]) + b"\x00" * 10
    import hashlib  # pylint: disable=import-outside-toplevel
    assert pgp.fingerprint(body) == hashlib.sha1(b"\x99\x00\x0b" + body).hexdigest().upper()


@pytest.mark.parametrize("value, valid", [
    ("C95B321B61E88C1809C4F759DDCAE044F796ECB0", True),
    ("c95b 321b 61e8 8c18 09c4  f759 ddca e044 f796 ecb0", True),
    ("0xC95B321B61E88C1809C4F759DDCAE044F796ECB0", True),
    ("DDCAE044F796ECB0", False),      # a long key ID is not a fingerprint
    ("F796ECB0", False),
    ("Z95B321B61E88C1809C4F759DDCAE044F796ECB0", False),
    ("", False),
    (None, False),
])
def test_valid_fingerprint(value, valid):
    assert pgp.valid_fingerprint(value) is valid
