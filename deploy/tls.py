"""The cluster's certificates: one CA, and a certificate per node signed by it.

Ray's TLS (``RAY_USE_TLS=1``) is mutual: every gRPC server asks the client for a certificate
signed by ``RAY_TLS_CA_CERT``, so a host without one cannot join or call the cluster, and
every byte between nodes (the Ray token, replication, the shard stream's handshake) is
encrypted. The same node certificate serves HTTPS at the Serve ingress (deploy/serve.yaml).

Once, where ``ray up`` runs (beside ``ray get-auth-token --generate``)::

    python deploy/tls.py ca ~/.vifusion/tls        # ca.crt, ca.key (0600)

``ray up`` copies both to every node (file_mounts), whose setup then runs::

    python deploy/tls.py node ~/.vifusion/tls      # node.crt, node.key for this host's addresses
    python deploy/tls.py env ~/.vifusion/tls       # the RAY_TLS_* exports for ~/.vifusion-env

Every node holds the CA's key so that it can sign its own certificate when the autoscaler
starts it: whoever is root on a node could mint a certificate, as they could read the Ray
token there; the CA admits nobody outside the cluster. Keep ``~/.vifusion/tls`` as private
as ``~/.ray/auth_token``. Clients of the API trust ``ca.crt`` (``curl --cacert``), or put
your own certificate in serve.yaml's ``ssl_certfile``/``ssl_keyfile``.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import socket
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
NODE_DAYS = 825  # the longest a public CA may issue; a node gets a new one at each setup


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write atomically with ``mode`` from the start: a key is never readable by others."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _folder(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def make_ca(folder: Path, name: str = "vifusion cluster CA") -> Path:
    """``folder``/ca.crt and ca.key, unless a CA is there already (it is kept: replacing it
    would lock out every node signed by the old one). Returns the certificate's path."""
    folder = _folder(Path(folder))
    crt = folder / "ca.crt"
    if crt.exists() and (folder / "ca.key").exists():
        return crt
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write(folder / "ca.key", _key_pem(key), 0o600)
    _write(crt, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return crt


def host_names() -> list[str]:
    """This host's names and addresses: what peers and clients may dial it by."""
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname()}
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            infos = socket.getaddrinfo(socket.gethostname(), None, family)
        except OSError:
            continue
        names.update(info[4][0] for info in infos)
    try:  # the address this host reaches others from (no packet is sent)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            names.add(s.getsockname()[0])
    except OSError:
        pass
    return sorted(names)


def _alt_names(names: list[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            # Both forms: gRPC matches an address against IP entries, some clients a DNS one.
            out += [x509.IPAddress(ipaddress.ip_address(name)), x509.DNSName(name)]
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def make_node(folder: Path, names: list[str] | None = None) -> tuple[Path, Path]:
    """``folder``/node.crt and node.key, signed by the CA there, for ``names`` (default: this
    host's, ``host_names``). Usable as server and client: Ray's TLS is mutual."""
    folder = Path(folder)
    ca_key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
    names = names or host_names()
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=NODE_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(_alt_names(names)), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(folder / "node.key", _key_pem(key), 0o600)
    # The chain (node, then CA): a client that trusts only the CA can verify the server.
    chain = cert.public_bytes(serialization.Encoding.PEM)
    _write(folder / "node.crt", chain, 0o644)
    return folder / "node.crt", folder / "node.key"


def ray_env(folder: Path) -> dict[str, str]:
    """What every Ray process of a node needs for mutual TLS with the cluster."""
    folder = Path(folder).resolve()
    return {
        "RAY_USE_TLS": "1",
        "RAY_TLS_SERVER_CERT": str(folder / "node.crt"),
        "RAY_TLS_SERVER_KEY": str(folder / "node.key"),
        "RAY_TLS_CA_CERT": str(folder / "ca.crt"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for cmd, text in (
        ("ca", "make the cluster's CA (kept if there)"),
        ("node", "make this node's certificate, signed by the CA"),
        ("env", "print the RAY_TLS exports for this node"),
    ):
        p = sub.add_parser(cmd, help=text)
        p.add_argument("folder", type=Path)
        if cmd == "node":
            p.add_argument(
                "--name", action="append", help="a name or address (default: this host's)"
            )
    args = parser.parse_args(argv)
    folder = args.folder.expanduser()
    if args.cmd == "ca":
        print(make_ca(folder))
    elif args.cmd == "node":
        if not (folder / "ca.key").exists():
            print(f"{folder}/ca.key is missing: run `tls.py ca {folder}` first", file=sys.stderr)
            return 2
        print(make_node(folder, args.name)[0])
    else:
        print("".join(f"export {k}={v}\n" for k, v in ray_env(folder).items()), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
