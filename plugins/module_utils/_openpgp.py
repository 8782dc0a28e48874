# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fingerprints of the primary keys in an OpenPGP public key file (armored or binary), for pinning repository keys.

Ships to nodes (module repo_key). Only the packet framing is read, not the key material: a fingerprint is a hash
over the public-key packet's body (RFC 9580 section 5.5.4), so nothing here judges signatures - apt and dnf do that
with the key once it is pinned. Why not a library: python-gnupg needs a gpg binary that minimal Debian 13 nodes lack
(apt verifies with sqv there), and PGPy no longer imports on Python 3.13.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

PUBLIC_KEY, SECRET_KEY, PUBLIC_SUBKEY, SECRET_SUBKEY = 6, 5, 14, 7
ARMOR = re.compile(r"-----BEGIN PGP PUBLIC KEY BLOCK-----(.*?)-----END PGP PUBLIC KEY BLOCK-----", re.S)


class KeyFileError(ValueError):
    """The file is not a public key file this can read; the message says why."""


def normalize(fingerprint):
    """A fingerprint as gpg prints it, with or without spaces, or 0x, in either case -> upper-case hex."""
    value = re.sub(r"\s+", "", str(fingerprint or "")).upper()
    return value[2:] if value.startswith("0X") else value


def valid_fingerprint(fingerprint):
    """A full v4 (40 hex digits) or v6 (64 hex digits) fingerprint; short and long key IDs are not enough."""
    return re.fullmatch(r"[0-9A-F]{40}|[0-9A-F]{64}", normalize(fingerprint)) is not None


def dearmor(data):
    """The binary packets of an armored key file (each armor block, concatenated), or the bytes as they are."""
    text = data.decode("ascii", "replace") if isinstance(data, bytes) else data
    blocks = ARMOR.findall(text)
    if not blocks:
        if "-----BEGIN PGP" in text:
            raise KeyFileError("the file holds an armored block that is not a public key block "
                               "(a secret key or a signature?)")
        return data if isinstance(data, bytes) else data.encode("latin-1")
    out = b""
    for block in blocks:
        # Armor headers ("Version: ...", "Comment: ...") contain a colon, which base64 never does; the line
        # starting with "=" is the CRC-24 checksum.
        body = "".join(line.strip() for line in block.splitlines()
                       if line.strip() and ":" not in line and not line.strip().startswith("="))
        try:
            out += base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise KeyFileError("the armored key is not valid base64 (%s)" % exc) from None
    return out


def packets(data):
    """(tag, body) of each OpenPGP packet, old and new framing (RFC 9580 section 4.2)."""
    pos, out = 0, []
    while pos < len(data):
        first = data[pos]
        if not first & 0x80:
            raise KeyFileError("not an OpenPGP key: byte %d is not a packet header" % pos)
        if first & 0x40:  # new format
            tag, pos = first & 0x3F, pos + 1
            if pos >= len(data):
                raise KeyFileError("truncated packet header")
            octet = data[pos]
            if octet < 192:
                length, pos = octet, pos + 1
            elif octet < 224:
                if pos + 1 >= len(data):
                    raise KeyFileError("truncated packet header")
                length, pos = ((octet - 192) << 8) + data[pos + 1] + 192, pos + 2
            elif octet == 255:
                length, pos = int.from_bytes(data[pos + 1:pos + 5], "big"), pos + 5
            else:
                raise KeyFileError("a partial-length packet (tag %d) cannot be part of a key" % tag)
        else:  # old format
            tag, kind, pos = (first >> 2) & 0x0F, first & 0x03, pos + 1
            if kind == 3:
                length = len(data) - pos
            else:
                size = (1, 2, 4)[kind]
                length, pos = int.from_bytes(data[pos:pos + size], "big"), pos + size
        if pos + length > len(data):
            raise KeyFileError("truncated packet (tag %d wants %d bytes, %d left)" % (tag, length, len(data) - pos))
        out.append((tag, data[pos:pos + length]))
        pos += length
    return out


def fingerprint(body):
    """Fingerprint of a public-key packet body: v4 SHA-1, v5/v6 SHA-256 (RFC 9580 section 5.5.4)."""
    version = body[0] if body else None
    if version == 4:
        return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    if version in (5, 6):
        prefix = b"\x9a" if version == 5 else b"\x9b"
        return hashlib.sha256(prefix + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    raise KeyFileError("unsupported OpenPGP key version %r (v3 keys are insecure and refused)" % version)


def primary_fingerprints(data):
    """Fingerprints of every primary public key in a key file. Subkeys belong to their primary key and are not
    listed. A secret key, or a file without any public key, is an error."""
    found = []
    for tag, body in packets(dearmor(data)):
        if tag in (SECRET_KEY, SECRET_SUBKEY):
            raise KeyFileError("the file holds a secret key; a repository key file must hold public keys only")
        if tag == PUBLIC_KEY:
            found.append(fingerprint(body))
    if not found:
        raise KeyFileError("no public key in the file")
    return found


def judge(data, allowed):
    """(fingerprints in the file, problem or None). Every primary key in the file must be one of `allowed`: a
    keyring that vouches for a repository is all-or-nothing, so one extra key appended to it is refused too."""
    try:
        have = primary_fingerprints(data)
    except KeyFileError as exc:
        return [], str(exc)
    want = {normalize(f) for f in allowed}
    extra = [f for f in have if f not in want]
    if extra:
        return have, "key(s) %s not pinned (allowed: %s)" % (", ".join(extra), ", ".join(sorted(want)))
    return have, None
