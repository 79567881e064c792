#!/usr/bin/env bash
# Throughput through Ferrule's full request path (Lua balancer: rewrite_by_lua +
# balancer_by_lua; log_by_lua only for EWMA backends, so not here; Ferrule's proxy
# headers, access log) versus a
# static-upstream NGINX proxying to the same backend, in the same run.
#
#   test/bench/throughput.sh            # builds ferrule --release first
#   SKIP_BUILD=1 DURATION=10s ROUNDS=3 CONNS=32 THREADS=2 PROXY_WORKERS=1 test/bench/throughput.sh
#
# Two baselines, same NGINX binary, same worker count, `upstream { server ..; keepalive 64; }`:
#   static        the same directives as Ferrule's locations (proxy-http.conf without the
#                 Lua lines, same maps, access log to a file): isolates the balancer's cost;
#   static-bare   proxy_pass + HTTP/1.1 keepalive only, no access log.
#   lua-floor     like static, but through the same Lua phases as Ferrule with empty
#                 bodies: `rewrite_by_lua_block {}` and an upstream
#                 whose balancer_by_lua only calls set_current_peer(<the backend>): the
#                 cost of the phases themselves, whatever the balancer does in them.
# Rounds alternate the targets so that noise hits all alike; figures are medians over
# rounds. Besides req/s, the CPU time of the proxy's workers per request (utime+stime
# from /proc) is reported: on a shared machine it is far less noisy than req/s.
# The goal is ferrule >= 0.95 x static.
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
PROXY_WORKERS=${PROXY_WORKERS:-1}
OUT=${OUT:-}

build_ferrule
WORK=$(mktemp -d /tmp/ferrule-bench.XXXXXX)
cleanup() {
    stop_ferrule "$WORK/ferrule"
    stop_nginx "$WORK/static"
    stop_nginx "$WORK/backend"
    [ "${KEEP:-0}" = 1 ] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT

BACKEND_IP=127.0.0.2
BPORT=$(free_port)
write_backend "$WORK/backend" "$BPORT" "$BACKEND_IP"
start_nginx "$WORK/backend"

# Baselines.
SPORT=$(free_port)
BAREPORT=$(free_port)
S=$WORK/static
mkdir -p "$S/conf" "$S/logs"
cp "$ROOT/rootfs/etc/nginx/proxy-headers.conf" "$S/conf/"
grep -v '_by_lua' "$ROOT/rootfs/etc/nginx/proxy-http.conf" |
    sed 's|proxy_pass http://ferrule_balancer;|proxy_pass http://backend;|' > "$S/conf/proxy.conf"
sed 's|proxy_pass http://backend;|proxy_pass http://floor;|' "$S/conf/proxy.conf" > "$S/conf/proxy-floor.conf"
FLOORPORT=$(free_port)
cat > "$S/conf/nginx.conf" <<NGX
load_module $MODULES/ndk_http_module.so;
load_module $MODULES/ngx_http_lua_module.so;
worker_processes $PROXY_WORKERS;
pid $S/logs/nginx.pid;
error_log $S/logs/error.log notice;
daemon off;
events { worker_connections 16384; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log $S/logs/access.log;
    client_body_temp_path $S/tmp/cb; proxy_temp_path $S/tmp/px;
    fastcgi_temp_path $S/tmp/fc; uwsgi_temp_path $S/tmp/uw; scgi_temp_path $S/tmp/sc;
    server_tokens off;
    sendfile on;
    keepalive_timeout 75s;
    proxy_next_upstream error timeout;
    proxy_buffering on;
    map \$http_upgrade \$ferrule_connection { default upgrade; "" ""; }
    map \$http_host \$ferrule_host { "" \$host; default \$http_host; }
    map \$http_x_request_id \$ferrule_request_id { "" \$request_id; default \$http_x_request_id; }
    upstream backend {
        server $BACKEND_IP:$BPORT;
        keepalive 64;
    }
    upstream floor {
        server 0.0.0.1:1;
        balancer_by_lua_block { require("ngx.balancer").set_current_peer("$BACKEND_IP", $BPORT) }
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$SPORT;
        server_name bench.test;
        location / { include $S/conf/proxy.conf; }
    }
    server {
        listen 127.0.0.1:$FLOORPORT;
        server_name bench.test;
        location / {
            rewrite_by_lua_block { }
            include $S/conf/proxy-floor.conf;
        }
    }
    server {
        listen 127.0.0.1:$BAREPORT;
        server_name bench.test;
        access_log off;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
NGX
start_nginx "$S"

# Ferrule.
F=$WORK/ferrule
mkdir -p "$F/manifests"
FHTTP=$(free_port); FHTTPS=$(free_port); FSTATUS=$(free_port)
cat > "$F/manifests/bench.yaml" <<YAML
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: ferrule
  annotations: { ingressclass.kubernetes.io/is-default-class: "true" }
spec: { controller: ferrule.dev/ingress-controller }
---
apiVersion: v1
kind: Service
metadata: { name: echo, namespace: bench }
spec:
  ports: [{ name: http, port: 80, targetPort: $BPORT }]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-1
  namespace: bench
  labels: { kubernetes.io/service-name: echo }
addressType: IPv4
ports: [{ name: http, port: $BPORT }]
endpoints:
  - addresses: ["$BACKEND_IP"]
    conditions: { ready: true }
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: echo, namespace: bench }
spec:
  rules:
  - host: bench.test
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: { service: { name: echo, port: { number: 80 } } }
YAML
start_ferrule "$F" "$F/manifests" "$FHTTP" "$FHTTPS" "$FSTATUS" --worker-processes "$PROXY_WORKERS"
wait_ready "$FSTATUS"

for port in "$FHTTP" "$SPORT" "$BAREPORT" "$FLOORPORT"; do
    wait_http "http://127.0.0.1:$port/" bench.test "$BACKEND_IP:$BPORT ferrule-bench-body"
done

TARGETS=(ferrule static lua-floor static-bare)
declare -A PORT=([ferrule]=$FHTTP [static]=$SPORT [static-bare]=$BAREPORT [lua-floor]=$FLOORPORT)
declare -A MASTER=([ferrule]="$F/nginx/run/nginx.pid" [static]="$S/logs/nginx.pid" [static-bare]="$S/logs/nginx.pid" [lua-floor]="$S/logs/nginx.pid")
# CPU ticks (utime + stime) of the workers of the NGINX serving target $1.
worker_ticks() {
    local t=0 p
    for p in $(ps -o pid= --ppid "$(cat "${MASTER[$1]}")"); do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    echo "$t"
}
HZ=$(getconf CLK_TCK)
ROWS=$WORK/rows
: > "$ROWS"
run_wrk() { # name duration -> appends "round name rps us_per_request"; fails on errors
    local name=$1 d=$2 round=$3 out c0 c1 n rps
    c0=$(worker_ticks "$name")
    out=$(wrk -t"$THREADS" -c"$CONNS" -d"$d" -H 'Host: bench.test' "http://127.0.0.1:${PORT[$name]}/")
    c1=$(worker_ticks "$name")
    if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
        echo "$name: errors during the run:" >&2
        echo "$out" >&2
        exit 1
    fi
    n=$(awk '/requests in/{print $1}' <<<"$out")
    rps=$(awk '/^Requests\/sec:/{print $2}' <<<"$out")
    local us
    us=$(awk -v c=$((c1 - c0)) -v n="$n" -v hz="$HZ" 'BEGIN{printf "%.1f", c / hz * 1e6 / n}')
    [ "$round" = 0 ] || echo "$round $name $rps $us" >> "$ROWS"
    log "round $round $name: $rps req/s, $us us CPU/request"
}

log "warm-up"
for name in "${TARGETS[@]}"; do run_wrk "$name" 2s 0; done
for r in $(seq "$ROUNDS"); do
    for name in "${TARGETS[@]}"; do run_wrk "$name" "$DURATION" "$r"; done
done

summary=$(python3 - "$ROWS" <<PY
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
rps, us = collections.defaultdict(dict), collections.defaultdict(dict)
for r, name, a, b in rows:
    rps[name][r], us[name][r] = float(a), float(b)
def med(d): return statistics.median(d.values())
# per-round ratios against static, then the median: noise between rounds cancels
def ratio(name, d, inverse=False):
    v = [(d["static"][r] / d[name][r]) if inverse else (d[name][r] / d["static"][r]) for r in d[name]]
    return statistics.median(v)
print("throughput ($(date -u +%FT%TZ); wrk -t$THREADS -c$CONNS -d$DURATION keepalive, $ROUNDS rounds, medians; proxy workers: $PROXY_WORKERS; load average $(cut -d' ' -f1-3 /proc/loadavg))")
for name in ["ferrule", "static", "lua-floor", "static-bare"]:
    print(f"  {name:<12} {med(rps[name]):9.0f} req/s  {med(us[name]):6.1f} us CPU/req   "
          f"vs static: req/s x{ratio(name, rps):.3f}, CPU x{ratio(name, us, True):.3f}")
r = ratio("ferrule", rps)
c = ratio("ferrule", us, True)
verdict = "goal met" if min(r, c) >= 0.95 else ("GOAL MISSED" if max(r, c) < 0.95 else "borderline")
print(f"  ferrule / static: req/s x{r:.3f}, by CPU per request x{c:.3f} ({verdict}, goal >= 0.95)")
PY
)
echo "$summary"
[ -n "$OUT" ] && echo "$summary" >> "$OUT"
exit 0
