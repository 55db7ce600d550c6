"""A certificate for Google's storage hosts, signed by a CA made for one job and then forgotten.

TensorFlow's GCS filesystem calls fixed ``https://`` URLs (www.googleapis.com, storage.googleapis.com)
with libcurl; it honours ``HTTPS_PROXY`` and ``CURL_CA_BUNDLE``, so the stand-in answers those hosts
through its proxy with this certificate. The CA's key is never written: nothing else can be signed
with it, and its name constraints limit it to ``googleapis.com`` names anyway.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from multiworker.private_files import write_private_text

__all__ = ["HOSTS", "make_certificates"]

HOSTS = ("www.googleapis.com", "storage.googleapis.com")


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """Write ``server.pem``, ``server.key`` and ``ca-bundle.pem`` (this job's CA, then the system's
    CAs, so other HTTPS hosts still verify) into ``directory``; return their paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=30)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "multiworker storage stand-in (one job)")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.NameConstraints(permitted_subtrees=[x509.DNSName("googleapis.com")],
                                              excluded_subtrees=None), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOSTS[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in HOSTS]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    server, server_key, bundle = directory / "server.pem", directory / "server.key", directory / "ca-bundle.pem"
    write_private_text(server, cert.public_bytes(pem).decode())
    write_private_text(server_key, key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()).decode())
    write_private_text(bundle, ca.public_bytes(pem).decode() + _system_cas())
    return server, server_key, bundle


def _system_cas() -> str:
    """The CAs the replicas would trust without the stand-in (the bundle replaces theirs)."""
    candidates = [os.environ.get("CURL_CA_BUNDLE"), os.environ.get("SSL_CERT_FILE"),
                  "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"]
    try:
        import certifi

        candidates.append(certifi.where())
    except ImportError:
        pass
    for path in candidates:
        if path and os.path.isfile(path):
            try:
                return "\n" + Path(path).read_text()
            except OSError:
                continue
    return ""
