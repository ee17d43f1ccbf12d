"""A throwaway certificate authority for the HTTPS tests, made with the openssl command line tool:
a CA certificate and server certificates it signs for 127.0.0.1 and localhost (ECDSA P-256)."""

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ServerCertificate:
    cert_path: Path
    key_path: Path
    ca_path: Path
    serial: str  # as the certificate states it (hex, upper case)


def _openssl(*args, cwd: Path):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


class CertificateAuthority:
    def __init__(self, directory: Path, name: str = "Fjord test CA"):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cert_path = self.directory / "ca.pem"
        self.key_path = self.directory / "ca.key"
        self._issued = 0
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", self.key_path, "-out", self.cert_path, "-days", "2", "-subj", f"/CN={name}",
                 cwd=self.directory)

    def issue(self, name: str = "server", hosts=("127.0.0.1", "localhost"),
              rsa: bool = False) -> ServerCertificate:
        """A server certificate (and its key: ECDSA P-256, or RSA 2048 with `rsa`) valid for `hosts`, in
        files named after `name`."""
        self._issued += 1
        key = self.directory / f"{name}.key"
        csr = self.directory / f"{name}.csr"
        cert = self.directory / f"{name}.pem"
        ext = self.directory / f"{name}.ext"
        san = ",".join(("IP:" if h[0].isdigit() else "DNS:") + h for h in hosts)
        ext.write_text(f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n")
        serial = f"{0x1000 + self._issued:X}"
        key_type = ["rsa:2048"] if rsa else ["ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
        _openssl("req", "-newkey", *key_type, "-nodes", "-keyout", key, "-out", csr, "-subj",
                 f"/CN={hosts[0]}", cwd=self.directory)
        _openssl("x509", "-req", "-in", csr, "-CA", self.cert_path, "-CAkey", self.key_path,
                 "-set_serial", f"0x{serial}", "-out", cert, "-days", "2", "-extfile", ext,
                 cwd=self.directory)
        return ServerCertificate(cert, key, self.cert_path, serial)
