#!/usr/bin/env python3
"""A Git smart-HTTP server over TLS on 127.0.0.1, for the daemon's push test.

Real `git http-backend` (CGI) behind Basic authentication, with the given
certificate: `git push https://...` must trust the certificate (its own
`http.sslCAInfo`) and authenticate (its own credential helper), as against a
real host.

    https_git_server.py PORT ROOT CERT KEY USER:PASSWORD [--redirect-to URL] [--log-auth FILE]

`--redirect-to URL` answers every request with a redirect to URL plus the
request's path (a remote that sends its clients to another origin);
`--log-auth FILE` appends every Authorization header the server is sent
to FILE (what a client handed it).
"""
import base64
import http.server
import os
import ssl
import subprocess
import sys

port, root, cert, key, user_pass = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
options = dict(zip(sys.argv[6::2], sys.argv[7::2]))
redirect_to, log_auth = options.get("--redirect-to"), options.get("--log-auth")
backend = os.path.join(subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True).stdout.strip(),
                       "git-http-backend")
expected = "Basic " + base64.b64encode(user_pass.encode()).decode()


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def serve(self):
        if log_auth and self.headers.get("Authorization"):
            with open(log_auth, "a") as f:
                f.write(self.headers["Authorization"] + "\n")
        if redirect_to:
            self.send_response(301)
            self.send_header("Location", redirect_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        data = self.body()
        env = dict(os.environ, GIT_PROJECT_ROOT=root, GIT_HTTP_EXPORT_ALL="1", REQUEST_METHOD=self.command,
                   PATH_INFO=path, QUERY_STRING=query, CONTENT_TYPE=self.headers.get("Content-Type", ""),
                   CONTENT_LENGTH=str(len(data)), REMOTE_USER=user_pass.split(":")[0], REMOTE_ADDR="127.0.0.1",
                   GIT_PROTOCOL=self.headers.get("Git-Protocol", ""))
        if self.headers.get("Content-Encoding") == "gzip":
            env["HTTP_CONTENT_ENCODING"] = "gzip"
        out = subprocess.run([backend], input=data, env=env, capture_output=True).stdout
        head, _, rest = out.partition(b"\r\n\r\n")
        if not rest and b"\n\n" in out:
            head, _, rest = out.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        self.wfile.write(rest)

    do_GET = serve
    do_POST = serve


server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
