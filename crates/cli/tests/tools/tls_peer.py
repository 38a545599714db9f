"""An HTTPS upstream for crates/cli/tests/tls.rs, on Python's ssl module:
it requires a client certificate signed by the CA it is given, and answers
every GET with 200 and the verified client's common name.

    python3 tls_peer.py CERT KEY CLIENT_CA

Prints "port N" once it listens on 127.0.0.1 (a port the kernel chose).
"""

import http.server
import ssl
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        subject = dict(x[0] for x in self.connection.getpeercert()["subject"])
        body = ("hello " + subject.get("commonName", "?")).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    cert, key, client_ca = sys.argv[1:4]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(client_ca)
    context.verify_mode = ssl.CERT_REQUIRED
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("port", server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
