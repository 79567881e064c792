#!/usr/bin/env python3
"""Posts N extra backends to the balancer API (store size for the latency benchmark).

usage: fill_store.py SOCKET TOKEN_FILE N
Backends are named bench_store-<i>_80, one unreachable endpoint each (never requested).
"""
import sys

from latency import api_post

sock, token_file, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
token = open(token_file).read().strip()
backends = [{"name": f"bench_store-{i}_80",
             "endpoints": [{"address": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
                            "port": 8080}],
             "load_balance": "round_robin"} for i in range(n)]
r = api_post(sock, token, "/configuration/backends", {"version": 500_000, "backends": backends})
print(f"posted {n} backends: {r}")
