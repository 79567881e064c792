#!/usr/bin/env python3
"""Endpoint change -> traffic latency, measured from the client's point of view.

Repeatedly rewrites one Service's manifest (atomic rename, as GitOps tools do) so that
its single endpoint moves to a new IP, then sends requests in a tight keepalive loop
until one is answered by the new endpoint (the backend's body names the address it
was reached on). The latency is file write -> first response from the new endpoint.

Prints JSON: {"samples": [...seconds...], "p50": .., "p90": .., "p99": .., "max": ..,
"errors": n}.
"""
import argparse
import http.client
import json
import os
import random
import socket
import sys
import time


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def api_post(sock_path, token, path, payload):
    c = UnixConnection(sock_path)
    c.request("POST", path, body=json.dumps(payload),
              headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    r = c.getresponse()
    body = r.read()
    c.close()
    if r.status != 201:
        raise SystemExit(f"POST {path}: {r.status} {body[:300]!r}")
    return json.loads(body)


def service_yaml(ns, name, port, ip):
    return f"""apiVersion: v1
kind: Service
metadata: {{ name: {name}, namespace: {ns} }}
spec:
  ports: [{{ name: http, port: 80, targetPort: {port} }}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: {ns}
  labels: {{ kubernetes.io/service-name: {name} }}
addressType: IPv4
ports: [{{ name: http, port: {port} }}]
endpoints:
  - addresses: ["{ip}"]
    conditions: {{ ready: true }}
"""


def write_atomic(path, text):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    i = round(p / 100 * (len(sorted_vals) - 1))
    return sorted_vals[min(i, len(sorted_vals) - 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True, help="Ferrule's HTTP port")
    ap.add_argument("--host", required=True)
    ap.add_argument("--mode", choices=["manifests", "api"], default="manifests",
                    help="change the endpoint through the manifests (whole controller) or "
                         "by POSTing to the balancer API (data plane only)")
    ap.add_argument("--file", help="manifests mode: the Service manifest to rewrite")
    ap.add_argument("--socket", help="api mode: the balancer API socket")
    ap.add_argument("--token-file", help="api mode: the balancer token file")
    ap.add_argument("--backend", help="api mode: the backend name to change")
    ap.add_argument("--ns", default="bench")
    ap.add_argument("--service", default="lat")
    ap.add_argument("--backend-port", type=int, required=True)
    ap.add_argument("--ips", required=True, help="comma-separated endpoint IPs to rotate through")
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=10.0)
    a = ap.parse_args()

    ips = a.ips.split(",")
    token = open(a.token_file).read().strip() if a.token_file else None
    conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=5)
    errors = 0

    def ask():
        nonlocal conn, errors
        try:
            conn.request("GET", "/", headers={"Host": a.host})
            r = conn.getresponse()
            body = r.read().decode(errors="replace")
            if r.status != 200:
                errors += 1
                return ""
            return body.split(" ", 1)[0]
        except Exception:
            errors += 1
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=5)
            return ""

    current = ask().rsplit(":", 1)[0]
    samples = []
    for i in range(a.n):
        # Decorrelate from the source's poll phase.
        time.sleep(random.uniform(0.05, 0.3))
        choices = [ip for ip in ips if ip != current]
        new = choices[i % len(choices)]
        want = f"{new}:{a.backend_port}"
        t0 = time.monotonic()
        if a.mode == "manifests":
            write_atomic(a.file, service_yaml(a.ns, a.service, a.backend_port, new))
        else:
            api_post(a.socket, token, "/configuration/backends", {
                "version": 1_000_000 + i,
                "backends": [{"name": a.backend,
                              "endpoints": [{"address": new, "port": a.backend_port}]}],
            })
        while True:
            got = ask()
            now = time.monotonic()
            if got == want:
                samples.append(now - t0)
                break
            if now - t0 > a.timeout:
                print(f"endpoint {new} not visible after {a.timeout}s (last answer {got!r})",
                      file=sys.stderr)
                samples.append(now - t0)
                break
        current = new
    s = sorted(samples)
    print(json.dumps({
        "n": len(s), "errors": errors, "samples": [round(x, 4) for x in samples],
        "min": s[0], "p50": pct(s, 50), "p90": pct(s, 90), "p99": pct(s, 99), "max": s[-1],
    }))


if __name__ == "__main__":
    main()
