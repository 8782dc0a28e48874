"""The lab's CA, the certificates of its components and users, and kubeconfigs."""

import datetime
import ipaddress

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

SERVICE_CIDR = "10.96.0.0/16"
USERS = (("admin", "gpufleet-lab-admin", "system:masters"),
         ("controller-manager", "system:kube-controller-manager", None),
         ("scheduler", "system:kube-scheduler", None),
         ("kwok", "system:kwok-controller", "system:masters"))


def _key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write(path, key=None, cert=None):
    if key is not None:
        path.with_suffix(".key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()))
        path.with_suffix(".key").chmod(0o600)
    if cert is not None:
        path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(cn, org=None):
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _cert(subject, key, issuer_cert, issuer_key, ca=False, sans=(), client=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer_cert.subject if issuer_cert else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), True)
    else:
        usage = [x509.ExtendedKeyUsageOID.CLIENT_AUTH] if client else [x509.ExtendedKeyUsageOID.SERVER_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    if sans:
        names = [x509.IPAddress(ipaddress.ip_address(s)) if s[0].isdigit() else x509.DNSName(s) for s in sans]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def make_pki(pki):
    pki.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca = _cert(_name("gpufleet-lab-ca"), ca_key, None, None, ca=True)
    _write(pki / "ca", ca_key, ca)
    server_key = _key()
    service_ip = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
    _write(pki / "apiserver", server_key, _cert(
        _name("kube-apiserver"), server_key, ca, ca_key,
        sans=("127.0.0.1", service_ip, "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")))
    for name, cn, org in USERS:
        key = _key()
        _write(pki / name, key, _cert(_name(cn, org), key, ca, ca_key, client=True))
    sa_key = _key()
    _write(pki / "sa", sa_key)
    (pki / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def serving_cert(pki, path, names):
    """A server certificate signed by the lab's CA for `names` (DNS names or IP addresses); made once."""
    if not path.with_suffix(".crt").exists():
        ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
        ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
        key = _key()
        _write(path, key, _cert(_name(names[-1]), key, ca, ca_key, sans=names))
    return path


def kubeconfig(path, server, pki, user):
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gpufleet-lab",
        "clusters": [{"name": "gpufleet-lab", "cluster": {"server": server,
                                                          "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate": str(pki / ("%s.crt" % user)),
                                          "client-key": str(pki / ("%s.key" % user))}}],
        "contexts": [{"name": "gpufleet-lab", "context": {"cluster": "gpufleet-lab", "user": user}}],
    }))
    path.chmod(0o600)
