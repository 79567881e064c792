#!/usr/bin/env bash
# `make run`: two echo backends and Ferrule serving examples/ on localhost:8080.
set -euo pipefail
cd "$(dirname "$0")/.."
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
python3 examples/echo.py 127.0.0.1 9001 & pids+=($!)
python3 examples/echo.py 127.0.0.2 9001 & pids+=($!)
cat <<'MSG'
Ferrule is starting on http://localhost:8080 (status on http://localhost:10254).
Try:
  curl -H 'Host: echo.localhost' http://localhost:8080/hello
  target/release/ferrule resources --nginx-prefix target/run/nginx
  curl -s http://localhost:10254/metrics | grep ferrule_
Edit examples/*.yaml and watch Ferrule apply the change. Ctrl-C stops everything.
MSG
"${CARGO_TARGET_DIR:-target}/release/ferrule" run --manifests examples \
  --nginx-prefix target/run/nginx --listen-address 127.0.0.1 \
  --http-port 8080 --https-port 8443 --status-address 127.0.0.1 --status-port 10254 \
  --allow-local-endpoints &
pids+=($!)
wait "${pids[-1]}"
