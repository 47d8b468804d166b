"""Certificates for HTTPS at the ingress, and the pieces deploy/tls.py makes a cluster's from.

``ingress_pair(cfg)``: the user's certificate and key where ``tls_certfile`` names them, else
a self-signed one for this host's names and addresses, made once in ``DATA_DIR/tls`` (the key
0600) and kept, so that clients that pinned it go on trusting it across restarts.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from vifusion import datadir
from vifusion._files import whole_file
from vifusion.config import Config

LEAF_DAYS = 825  # the longest a public CA may issue; browsers refuse longer ones


def write_private(path: Path, data: bytes, mode: int) -> None:
    """``path`` written whole (``whole_file``) with ``mode`` from its creation."""
    with whole_file(path, mode) as f:
        f.write(data)
    os.chmod(path, mode)  # whatever the umask took away (a certificate is 0644)


def private_folder(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def host_names() -> list[str]:
    """This host's names and addresses: what peers and clients may dial it by."""
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname()}
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            infos = socket.getaddrinfo(socket.gethostname(), None, family)
        except OSError:
            continue
        names.update(str(info[4][0]) for info in infos)
    try:  # the address this host reaches others from (a UDP connect sends no packet)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            names.add(s.getsockname()[0])
    except OSError:
        pass
    return sorted(names)


def leaf(
    key: ec.EllipticCurvePrivateKey,
    names: list[str],
    issuer: x509.Name | None = None,
    issuer_key: ec.EllipticCurvePrivateKey | None = None,
) -> x509.Certificate:
    """A server-and-client certificate for ``names`` (addresses as IP and DNS entries: gRPC
    matches an address against IP entries, some clients a DNS one); self-signed unless an
    issuer is given."""
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt += [x509.IPAddress(ipaddress.ip_address(name)), x509.DNSName(name)]
        except ValueError:
            alt.append(x509.DNSName(name))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(issuer_key or key, hashes.SHA256())
    )


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def ingress_pair(cfg: Config) -> tuple[Path, Path]:
    """(certificate, key) for HTTPS: ``cfg``'s own pair, or the data dir's self-signed one
    (made on first use). The certificate file is also what a client verifies with."""
    if cfg.tls_certfile is not None and cfg.tls_keyfile is not None:
        for path in (cfg.tls_certfile, cfg.tls_keyfile):
            if not path.is_file():
                raise FileNotFoundError(f"{path}: no such file (tls_certfile / tls_keyfile)")
        return cfg.tls_certfile, cfg.tls_keyfile
    folder = private_folder(cfg.data_dir / datadir.TLS)
    crt, key_file = folder / "ingress.crt", folder / "ingress.key"
    if not (crt.is_file() and key_file.is_file()):
        key = new_key()
        write_private(key_file, key_pem(key), 0o600)
        write_private(crt, pem(leaf(key, host_names())), 0o644)
    return crt, key_file
