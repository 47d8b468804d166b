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
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID

from serve._tls import host_names, key_pem, leaf, new_key, pem, private_folder, write_private

CA_DAYS = 3650


def make_ca(folder: Path, name: str = "vifusion cluster CA") -> Path:
    """``folder``/ca.crt and ca.key, unless a CA is there already (it is kept: replacing it
    would lock out every node signed by the old one). Returns the certificate's path."""
    folder = private_folder(Path(folder))
    crt = folder / "ca.crt"
    if crt.exists() and (folder / "ca.key").exists():
        return crt
    key = new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    usage = dict.fromkeys(
        (
            "digital_signature",
            "content_commitment",
            "key_encipherment",
            "data_encipherment",
            "key_agreement",
            "encipher_only",
            "decipher_only",
        ),
        False,
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(key_cert_sign=True, crl_sign=True, **usage), critical=True)
        .sign(key, hashes.SHA256())
    )
    write_private(folder / "ca.key", key_pem(key), 0o600)
    write_private(crt, pem(cert), 0o644)
    return crt


def make_node(folder: Path, names: list[str] | None = None) -> tuple[Path, Path]:
    """``folder``/node.crt and node.key, signed by the CA there, for ``names`` (default: this
    host's). Server and client at once: Ray's TLS is mutual. node.crt holds the chain, node
    then CA: a server sends both, and a client handed this one file trusts the CA in it."""
    folder = Path(folder)
    ca_key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
    key = new_key()
    cert = leaf(key, names or host_names(), ca_cert.subject, ca_key)
    write_private(folder / "node.key", key_pem(key), 0o600)
    write_private(folder / "node.crt", pem(cert) + pem(ca_cert), 0o644)
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
