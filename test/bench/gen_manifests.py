#!/usr/bin/env python3
"""Writes N Services (with EndpointSlices) and Ingress rules routing to each of them
into DIR: a large cluster for the latency benchmark. Files hold 1,000 objects each.

usage: gen_manifests.py DIR N [services|hosts|paths]
  services only the Services and EndpointSlices, no Ingress: the source and the model
         builder handle N Services, but none becomes a backend (fill the balancer
         store separately)
  hosts  one Ingress and one host per Service (N NGINX server blocks)
  paths  one Ingress per 1,000 Services, one path per Service (N locations in
         N/1000 server blocks): the same N backends with far fewer TLS servers,
         so that NGINX starts in seconds rather than minutes
"""
import os
import sys

d, n = sys.argv[1], int(sys.argv[2])
shape = sys.argv[3] if len(sys.argv) > 3 else "services"
os.makedirs(d, exist_ok=True)
per = 1000


def service(i):
    ip = f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"
    return f"""apiVersion: v1
kind: Service
metadata: {{ name: s{i}, namespace: scale }}
spec:
  ports: [{{ name: http, port: 80, targetPort: 8080 }}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: s{i}-1
  namespace: scale
  labels: {{ kubernetes.io/service-name: s{i} }}
addressType: IPv4
ports: [{{ name: http, port: 8080 }}]
endpoints:
  - addresses: ["{ip}"]
    conditions: {{ ready: true }}
"""


def ingress(name, host, rules):
    paths = "".join(f"""      - path: {p}
        pathType: Prefix
        backend: {{ service: {{ name: {svc}, port: {{ number: 80 }} }} }}
""" for p, svc in rules)
    return f"""apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{ name: {name}, namespace: scale, creationTimestamp: "2026-01-01T00:00:00Z" }}
spec:
  rules:
  - host: {host}
    http:
      paths:
{paths}"""


for f in range(0, n, per):
    ids = range(f, min(n, f + per))
    docs = [service(i) for i in ids]
    if shape == "services":
        pass
    elif shape == "hosts":
        docs += [ingress(f"i{i}", f"h{i}.scale.test", [("/", f"s{i}")]) for i in ids]
    else:
        docs.append(ingress(f"i{f // per}", f"h{f // per}.scale.test",
                            [(f"/p{i}", f"s{i}") for i in ids]))
    with open(os.path.join(d, f"scale-{f // per:03d}.yaml"), "w") as out:
        out.write("---\n".join(docs))
