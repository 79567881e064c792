#!/usr/bin/env python3
"""A tiny echo backend for `make run`: answers with JSON naming itself and the request."""
import http.server, sys, json
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def handle_one(self):
        body = json.dumps({"backend": "%s:%d" % self.server.server_address, "method": self.command, "path": self.path, "version": self.request_version, "headers": dict(self.headers)}).encode()
        self.send_response(200); self.send_header("Content-Type","application/json"); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = handle_one
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()
