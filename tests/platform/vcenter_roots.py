"""vCenter's "Download trusted root CA certificates" endpoint, `/certs/download.zip`, for a vcsim
with TLS (our vcsim does not serve it): a zip of the CA that signed its certificate, laid out
as vCenter lays it out (`certs/lin/<hash>.0` PEM files, `certs/win/<hash>.0.crt` the same in DER
form), served over https with vcsim's own certificate, as vCenter serves it beside its API.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import ssl
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

from hostaffinity.runtime.http.certificates import ServingIdentity


def trusted_roots_zip(ca_pem: bytes) -> bytes:
    """The zip vCenter serves at /certs/download.zip, holding one root CA."""
    name = hashlib.sha1(ca_pem).hexdigest()[:8]  # the layout's <hash>; its value is vCenter's
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr(f"certs/lin/{name}.0", ca_pem)
        zipped.writestr(f"certs/win/{name}.0.crt", ssl.PEM_cert_to_DER_cert(ca_pem.decode()))
    return archive.getvalue()


@contextlib.contextmanager
def trusted_roots_served(identity: ServingIdentity) -> Iterator[str]:
    """Serve /certs/download.zip over https with `identity`'s certificate; yields the base
    address (`https://127.0.0.1:<port>`)."""
    body = trusted_roots_zip(identity.ca_pem)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/certs/download.zip":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/zip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test reads what the client got."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as folder:
        cert, key = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        cert.write_bytes(identity.cert_pem)
        key.write_bytes(identity.key_pem)
        context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
