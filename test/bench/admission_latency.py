#!/usr/bin/env python3
"""Times the admission webhook's answers as the API server sees them: each review on
a new TLS connection (TCP_NODELAY on the client's side, as Go's net/http sets it),
from connect() to the last byte of the answer. Prints the median, p90, p99 and max.

usage: admission_latency.py PORT CA_PEM [N] [HOST]

PORT is a running `ferrule run --admission-port PORT` (on 127.0.0.1), CA_PEM the CA
of its certificate, N the number of reviews (default 60), HOST the host the candidate
Ingress claims (default h1.scale.test: with test/bench/gen_manifests.py's `hosts`
shape, an older Ingress owns it, so every answer carries a warning).
"""
import json
import socket
import ssl
import statistics
import sys
import time

port, ca = int(sys.argv[1]), sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 60
host = sys.argv[4] if len(sys.argv) > 4 else "h1.scale.test"

review = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "00000000-0000-4000-8000-000000000001",
        "kind": {"group": "networking.k8s.io", "version": "v1", "kind": "Ingress"},
        "resource": {"group": "networking.k8s.io", "version": "v1", "resource": "ingresses"},
        "namespace": "scale",
        "name": "candidate",
        "operation": "CREATE",
        "userInfo": {"username": "bench"},
        "object": {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": "candidate", "namespace": "scale"},
            "spec": {
                "rules": [{
                    "host": host,
                    "http": {"paths": [{
                        "path": "/", "pathType": "Prefix",
                        "backend": {"service": {"name": "s1", "port": {"number": 80}}},
                    }]},
                }],
            },
        },
        "dryRun": False,
    },
}
body = json.dumps(review).encode()
request = (
    "POST /networking/v1/ingresses HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    "Content-Type: application/json\r\n"
    f"Content-Length: {len(body)}\r\n\r\n"
).encode() + body

ctx = ssl.create_default_context(cafile=ca)


def one():
    start = time.perf_counter()
    raw = socket.create_connection(("127.0.0.1", port))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = tls.recv(65536)
            if not chunk:
                raise SystemExit(f"connection closed after {data!r}")
            data += chunk
        head, rest = data.split(b"\r\n\r\n", 1)
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            chunk = tls.recv(65536)
            if not chunk:
                raise SystemExit("connection closed in the body")
            rest += chunk
        elapsed = time.perf_counter() - start
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit(head.decode(errors="replace"))
    return elapsed * 1000


one()  # warm up (the index of the snapshot is made on the first review)
times = sorted(one() for _ in range(n))
p = lambda q: times[min(len(times) - 1, int(q * len(times)))]  # noqa: E731
print(
    f"n={n} median={statistics.median(times):.1f}ms p90={p(0.90):.1f}ms "
    f"p99={p(0.99):.1f}ms max={times[-1]:.1f}ms"
)
