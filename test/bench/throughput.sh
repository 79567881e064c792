#!/usr/bin/env bash
# Throughput through Ferrule's full request path (a plain round-robin backend:
# balanced by the C fast path, nginx-module/, without entering Lua; rewrite_by_lua
# only for canary, affinity, rewrite-target, other protocols and snippets, log_by_lua
# only for EWMA backends, so neither here; Ferrule's proxy headers, access log)
# versus a static-upstream NGINX proxying to the same backend, in the same run.
# `ferrule-lua` is the same Ferrule with --no-fast-path: balancer_by_lua for every
# request. Both count every request for /metrics (the defaults: the C module's log
# phase into shared memory, a Lua log phase without the module); `ferrule-nometrics`
# is `ferrule` with --enable-metrics=false, and the summary gives ferrule against it
# (the cost of the request metrics, goal >= 0.98). `ferrule-quiet` also turns the
# access log off (ConfigMap disable-access-log): what observability costs as a whole.
# `ferrule-cors` is the same Ferrule on a host with enable-cors (requests with an allowed Origin), `ferrule-allow`
# one with whitelist-source-range (loopback allowed), `ferrule-basic` one with basic
# auth (a {SHA} password, sent with every request), and
# `ferrule-gzip` a Ferrule whose ConfigMap turns use-gzip on (requests that accept
# gzip): what those features cost against static. `ferrule-tcp` is the same
# Ferrule's TCP service (--tcp-services-configmap) to the same backend: HTTP over
# NGINX's stream proxy, the peer picked by njs per connection.
#
#   test/bench/throughput.sh            # builds ferrule --release first
#   SKIP_BUILD=1 DURATION=10s ROUNDS=3 CONNS=32 THREADS=2 PROXY_WORKERS=1 test/bench/throughput.sh
#
# Two baselines, same NGINX binary, same worker count, `upstream { server ..; keepalive 64; }`,
# Ferrule's defaults of ingress-nginx's keys where they apply (proxy_buffering off,
# multi_accept on) and Ferrule's module loaded where it is installed (its $request_id, aliases,
# access log line and header lines):
#   static        the same directives as Ferrule's locations (proxy-http.conf without the
#                 Lua lines, same maps, access log to a file, the server's HSTS header):
#                 isolates the balancer's cost;
#   static-bare   proxy_pass + HTTP/1.1 keepalive only, no access log: the summary gives
#                 Ferrule's defaults against it (issue 20's goal, >= 0.90).
#   lua-floor     like static, but through the same Lua phases as Ferrule with empty
#                 bodies: `rewrite_by_lua_block {}` and an upstream
#                 whose balancer_by_lua only calls set_current_peer(<the backend>): the
#                 cost of the phases themselves, whatever the balancer does in them.
#   balancer-floor  lua-floor without the rewrite phase: the least any balancer_by_lua
#                 design costs.
# On a machine with two or more cores the proxies' workers are pinned to CPU 0 and wrk
# and the backend to the other cores (PIN=0 turns this off): the proxy under test is then
# the bottleneck and does not fight the client for its core, which on a 2-core machine
# moved req/s by +-20 % between rounds.
# Rounds alternate the targets so that noise hits all alike; figures are medians over
# rounds. Besides req/s, the CPU time of the proxy's workers per request (utime+stime
# from /proc) is reported: on a shared machine it is far less noisy than req/s.
# The goal is ferrule >= 0.95 x static.
# PERF=1 also samples each target's workers with `perf record` during every round and
# prints the samples per request by library (kernel, nginx, Lua, libc, libcrypto): which
# part of a target's cost differs from static (perf itself slows every target alike).
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
PROXY_WORKERS=${PROXY_WORKERS:-1}
OUT=${OUT:-}
# paired: each round runs static and one other target at the same time, both workers
# pinned to CPU 0, so both see the same machine at every moment and the kernel splits
# the core between them: the req/s ratio is the cost ratio, and moments of a slow
# (shared, virtual) CPU hit both alike. sequential: one target after the other.
MODE=${MODE:-paired}

PERF_HZ=4999 # perf's sampling rate (PERF=1)
if [ "${PERF:-0}" = 1 ] && ! command -v perf > /dev/null; then
    echo "PERF=1 needs perf: apt-get install linux-perf" >&2
    exit 1
fi
build_ferrule
WORK=$(mktemp -d /tmp/ferrule-bench.XXXXXX)
cleanup() {
    stop_ferrule "$WORK/ferrule"
    stop_ferrule "$WORK/ferrule-lua"
    stop_ferrule "$WORK/ferrule-nometrics"
    stop_ferrule "$WORK/ferrule-quiet"
    stop_ferrule "$WORK/ferrule-gzip"
    stop_nginx "$WORK/static"
    stop_nginx "$WORK/floor"
    stop_nginx "$WORK/bare"
    stop_nginx "$WORK/balfloor"
    stop_nginx "$WORK/backend"
    [ "${KEEP:-0}" = 1 ] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT

BACKEND_IP=127.0.0.2
BPORT=$(free_port)
write_backend "$WORK/backend" "$BPORT" "$BACKEND_IP"
start_nginx "$WORK/backend"

# Baselines: one NGINX each, so that each has its own worker (paired mode runs two
# targets at once and relies on the kernel splitting CPU 0 between two workers).
grep -v '_by_lua' "$ROOT/rootfs/etc/nginx/proxy-http.conf" |
    sed 's|proxy_pass http://ferrule_balancer;|proxy_pass http://backend;|' > "$WORK/proxy.conf"
# Ferrule's module, where installed: Ferrule's NGINX draws $request_id from it, and
# the headers' variables that are the first non-empty of others are its aliases, not
# maps (as nginx.conf.tera without use-forwarded-headers, the defaults).
FERRULE_MODULE=
PROXY_HEADERS=proxy-headers.conf
# as Ferrule by default: ingress-nginx's upstreaminfo format ([$proxy_host] for the backend)
LOG_FORMAT=$(cat <<'NGX'
log_format upstreaminfo '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_length $request_time [$proxy_host] [] $upstream_addr $upstream_response_length $upstream_response_time $upstream_status $ferrule_request_id';
NGX
)
FORWARDED='map $http_host $ferrule_host { "" $host; default $http_host; }
    map $http_x_request_id $ferrule_request_id { "" $request_id; default $http_x_request_id; }
    map $ferrule_host $ferrule_upstream_host { default $ferrule_host; }
    map "" $ferrule_scheme { default $scheme; }
    map "" $ferrule_forwarded_host { default $ferrule_host; }
    map "" $ferrule_forwarded_port { default $server_port; }
    map "" $ferrule_forwarded_for { default $remote_addr; }'
if [ -f "$MODULES/ngx_http_ferrule_module.so" ]; then
    FERRULE_MODULE="load_module $MODULES/ngx_http_ferrule_module.so;"
    FORWARDED='ferrule_alias $ferrule_host $http_host $host;
    ferrule_alias $ferrule_request_id $http_x_request_id $request_id;
    ferrule_alias $ferrule_upstream_host $ferrule_host;
    ferrule_alias $ferrule_scheme $scheme;
    ferrule_alias $ferrule_forwarded_host $ferrule_host;
    ferrule_alias $ferrule_forwarded_port $server_port;
    ferrule_alias $ferrule_forwarded_for $remote_addr;'
    FORWARDED+='
    ferrule_header_lines $ferrule_proxy_headers $remote_addr X-Request-ID $ferrule_request_id
        X-Original-URI $ferrule_original_uri X-Forwarded-For $ferrule_forwarded_for
        X-Forwarded-Host $ferrule_forwarded_host X-Forwarded-Port $ferrule_forwarded_port
        X-Forwarded-Proto $ferrule_scheme X-Forwarded-Scheme $ferrule_scheme X-Scheme $ferrule_scheme;'
    PROXY_HEADERS=proxy-headers-module.conf
    # and its line of the access log, as Ferrule's
    LOG_FORMAT='ferrule_upstreaminfo $ferrule_upstreaminfo $proxy_host $ferrule_request_id;
    log_format upstreaminfo escape=none $ferrule_upstreaminfo;'
fi
# write_baseline NAME PORT LOCATION_BODY: an NGINX in $WORK/NAME proxying to the backend.
write_baseline() {
    local d=$WORK/$1 port=$2 body=$3
    mkdir -p "$d/conf" "$d/logs"
    cp "$ROOT/rootfs/etc/nginx/$PROXY_HEADERS" "$d/conf/proxy-headers.conf"
    cp "$WORK/proxy.conf" "$d/conf/"
    sed 's|proxy_pass http://backend;|proxy_pass http://floor;|' "$WORK/proxy.conf" > "$d/conf/proxy-floor.conf"
    cat > "$d/conf/nginx.conf" <<NGX
load_module $MODULES/ndk_http_module.so;
load_module $MODULES/ngx_http_lua_module.so;
$FERRULE_MODULE
worker_processes $PROXY_WORKERS;
pid $d/logs/nginx.pid;
error_log $d/logs/error.log notice;
daemon off;
events { worker_connections 16384; multi_accept on; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    # as Ferrule by default: ingress-nginx's upstreaminfo format, buffered
    $LOG_FORMAT
    access_log $d/logs/access.log upstreaminfo buffer=32k flush=1s;
    client_body_temp_path $d/tmp/cb; proxy_temp_path $d/tmp/px;
    fastcgi_temp_path $d/tmp/fc; uwsgi_temp_path $d/tmp/uw; scgi_temp_path $d/tmp/sc;
    server_tokens off;
    sendfile on;
    keepalive_timeout 75s;
    proxy_next_upstream error timeout;
    proxy_http_version 1.1;
    proxy_buffering off;
    map \$http_upgrade \$ferrule_connection { default upgrade; "" ""; }
    map "" \$ferrule_original_uri { default ""; }
    map \$https \$ferrule_hsts { on "max-age=31536000; includeSubDomains"; default ""; }
    $FORWARDED
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
        listen 127.0.0.1:$port;
        server_name bench.test;
        add_header Strict-Transport-Security \$ferrule_hsts always;
        location / { $body }
    }
}
NGX
    start_nginx "$d"
}
SPORT=$(free_port)
FLOORPORT=$(free_port)
BAREPORT=$(free_port)
BALFLOORPORT=$(free_port)
write_baseline static "$SPORT" "include proxy.conf;"
write_baseline floor "$FLOORPORT" "rewrite_by_lua_block { } include proxy-floor.conf;"
write_baseline balfloor "$BALFLOORPORT" "include proxy-floor.conf;"
write_baseline bare "$BAREPORT" 'access_log off; proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";'

# Ferrule.
F=$WORK/ferrule
FL=$WORK/ferrule-lua
FN=$WORK/ferrule-nometrics
FQ=$WORK/ferrule-quiet
FG=$WORK/ferrule-gzip
mkdir -p "$F/manifests" "$FL" "$FN" "$FQ/manifests" "$FG/manifests"
FHTTP=$(free_port); FHTTPS=$(free_port); FSTATUS=$(free_port); FTCP=$(free_port)
LHTTP=$(free_port); LHTTPS=$(free_port); LSTATUS=$(free_port)
NHTTP=$(free_port); NHTTPS=$(free_port); NSTATUS=$(free_port)
QHTTP=$(free_port); QHTTPS=$(free_port); QSTATUS=$(free_port)
GHTTP=$(free_port); GHTTPS=$(free_port); GSTATUS=$(free_port)
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
YAML
# echo_ingress NAME HOST [ANNOTATION=VALUE...]: an Ingress of HOST to the echo Service.
echo_ingress() {
    local name=$1 host=$2 a
    shift 2
    printf -- '---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: %s\n  namespace: bench\n  annotations:\n' "$name"
    [ $# -gt 0 ] || echo '    {}'
    for a; do printf '    nginx.ingress.kubernetes.io/%s: "%s"\n' "${a%%=*}" "${a#*=}"; done
    printf 'spec:\n  rules:\n  - host: %s\n    http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend: { service: { name: echo, port: { number: 80 } } }\n' "$host"
}
# basic auth: {SHA} rather than apr1, whose hashing per request (NGINX reads and
# checks the password file on every request) would measure the hash, not Ferrule.
BASIC_USER=bench BASIC_PASSWORD=bench-secret
BASIC_HTPASSWD="$BASIC_USER:{SHA}$(printf %s "$BASIC_PASSWORD" | openssl dgst -binary -sha1 | base64)"
{
    echo_ingress echo bench.test
    echo_ingress cors cors.test enable-cors=true cors-allow-origin=https://app.example
    echo_ingress allow allow.test whitelist-source-range=127.0.0.0/8,10.0.0.0/8
    echo_ingress basic basic.test auth-type=basic auth-secret=basic-auth "auth-realm=bench"
    cat <<YAML
---
apiVersion: v1
kind: Secret
metadata: { name: basic-auth, namespace: bench }
type: Opaque
stringData:
  auth: "$BASIC_HTPASSWD"
YAML
} >> "$F/manifests/bench.yaml"
cp "$F/manifests/bench.yaml" "$FG/manifests/"
cp "$F/manifests/bench.yaml" "$FQ/manifests/"
cat > "$FQ/manifests/config.yaml" <<YAML
apiVersion: v1
kind: ConfigMap
metadata: { name: ferrule, namespace: bench }
data: { disable-access-log: "true" }
YAML
cat > "$F/manifests/tcp.yaml" <<YAML
apiVersion: v1
kind: ConfigMap
metadata: { name: tcp-services, namespace: bench }
data: { "$FTCP": "bench/echo:80" }
YAML
cat > "$FG/manifests/config.yaml" <<YAML
apiVersion: v1
kind: ConfigMap
metadata: { name: ferrule, namespace: bench }
data: { use-gzip: "true", gzip-types: "*", gzip-min-length: "0" }
YAML
start_ferrule "$F" "$F/manifests" "$FHTTP" "$FHTTPS" "$FSTATUS" --worker-processes "$PROXY_WORKERS" \
    --tcp-services-configmap bench/tcp-services
start_ferrule "$FL" "$F/manifests" "$LHTTP" "$LHTTPS" "$LSTATUS" --worker-processes "$PROXY_WORKERS" \
    --no-fast-path
start_ferrule "$FN" "$F/manifests" "$NHTTP" "$NHTTPS" "$NSTATUS" --worker-processes "$PROXY_WORKERS" \
    --enable-metrics=false
start_ferrule "$FQ" "$FQ/manifests" "$QHTTP" "$QHTTPS" "$QSTATUS" --worker-processes "$PROXY_WORKERS" \
    --enable-metrics=false --configmap bench/ferrule
start_ferrule "$FG" "$FG/manifests" "$GHTTP" "$GHTTPS" "$GSTATUS" --worker-processes "$PROXY_WORKERS" \
    --configmap bench/ferrule
wait_ready "$FSTATUS"
wait_ready "$GSTATUS"
wait_ready "$LSTATUS"
wait_ready "$NSTATUS"
wait_ready "$QSTATUS"

for port in "$FHTTP" "$FTCP" "$LHTTP" "$NHTTP" "$QHTTP" "$GHTTP" "$SPORT" "$BAREPORT" "$FLOORPORT" "$BALFLOORPORT"; do
    wait_http "http://127.0.0.1:$port/" bench.test "$BACKEND_IP:$BPORT ferrule-bench-body"
done
wait_http "http://127.0.0.1:$FHTTP/" cors.test "$BACKEND_IP:$BPORT ferrule-bench-body"
# The features are on: an allowed Origin gets CORS headers, gzip is served.
curl -s -D - -o /dev/null -H 'Host: cors.test' -H 'Origin: https://app.example' "http://127.0.0.1:$FHTTP/" |
    grep -qi '^access-control-allow-origin: https://app.example' || { echo "ferrule-cors: no CORS headers" >&2; exit 1; }
# The allowlist lets loopback in; basic auth wants the password (and refuses without).
wait_http "http://127.0.0.1:$FHTTP/" allow.test "$BACKEND_IP:$BPORT ferrule-bench-body"
BASIC_AUTH="Authorization: Basic $(printf %s "$BASIC_USER:$BASIC_PASSWORD" | base64)"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: basic.test' -H "$BASIC_AUTH" "http://127.0.0.1:$FHTTP/")" = 200 ] ||
    { echo "ferrule-basic: the password is refused" >&2; exit 1; }
[ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: basic.test' "http://127.0.0.1:$FHTTP/")" = 401 ] ||
    { echo "ferrule-basic: served without a password" >&2; exit 1; }
curl -s -D - -o /dev/null -H 'Host: bench.test' -H 'Accept-Encoding: gzip' "http://127.0.0.1:$GHTTP/" |
    grep -qi '^content-encoding: gzip' || { echo "ferrule-gzip: not gzipped" >&2; exit 1; }
# What each Ferrule target measures: the backend on the C fast path, or not.
fast_path_of() { # NGINX_PREFIX
    curl -s --unix-socket "$1/run/balancer.sock" -H "Authorization: Bearer $(cat "$1/conf/balancer.token")" \
        http://x/configuration/backends/bench_echo_80 |
        python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["fast_path"]))'
}
FAST_PEERS=$(fast_path_of "$F/nginx")
[ "$FAST_PEERS" = "[\"$BACKEND_IP:$BPORT\"]" ] ||
    { echo "ferrule: the backend is not on the C fast path ($FAST_PEERS): make deps builds it" >&2; exit 1; }
[ "$(fast_path_of "$FL/nginx")" = null ] || { echo "ferrule-lua: fast path on" >&2; exit 1; }
[ "$(fast_path_of "$FN/nginx")" = "$FAST_PEERS" ] || { echo "ferrule-nometrics: fast path off" >&2; exit 1; }
[ "$(fast_path_of "$FQ/nginx")" = "$FAST_PEERS" ] || { echo "ferrule-quiet: fast path off" >&2; exit 1; }
# ferrule and ferrule-lua count requests (from the module, from Lua); nometrics does not
metrics_source() { # STATUS_PORT
    curl -s "http://127.0.0.1:$1/metrics" | sed -n 's/^ferrule_request_metrics_up{source="\([a-z]*\)"}.*/\1/p'
}
[ "$(metrics_source "$FSTATUS")" = module ] || { echo "ferrule: request metrics not from the module" >&2; exit 1; }
[ "$(metrics_source "$LSTATUS")" = lua ] || { echo "ferrule-lua: request metrics not from Lua" >&2; exit 1; }
[ "$(metrics_source "$NSTATUS")" = none ] || { echo "ferrule-nometrics: request metrics on" >&2; exit 1; }
[ "$(metrics_source "$QSTATUS")" = none ] || { echo "ferrule-quiet: request metrics on" >&2; exit 1; }
grep -q 'access_log off;' "$FQ/nginx/conf/nginx.conf" || { echo "ferrule-quiet: access log on" >&2; exit 1; }

# Pinning (see the header): proxies on CPU 0, wrk and the backend on the others.
PIN=${PIN:-1}
[ "$(nproc)" -ge 2 ] || PIN=0
CLIENT_CPUS=1-$(($(nproc) - 1))
WRK=(wrk)
workers_of() { # MASTER_PIDFILE: the pids of its workers, one per line
    ps -o pid= --ppid "$(cat "$1")"
}
pin_workers() { # MASTER_PIDFILE CPUS
    local p
    for p in $(workers_of "$1"); do taskset -pc "$2" "$p" > /dev/null; done
}
if [ "$PIN" = 1 ]; then
    pin_workers "$F/nginx/run/nginx.pid" 0
    pin_workers "$FL/nginx/run/nginx.pid" 0
    pin_workers "$FN/nginx/run/nginx.pid" 0
    pin_workers "$FQ/nginx/run/nginx.pid" 0
    pin_workers "$FG/nginx/run/nginx.pid" 0
    for b in static floor balfloor bare; do pin_workers "$WORK/$b/logs/nginx.pid" 0; done
    pin_workers "$WORK/backend/logs/nginx.pid" "$CLIENT_CPUS"
    WRK=(taskset -c "$CLIENT_CPUS" wrk)
fi

TARGETS=(ferrule ferrule-nometrics ferrule-quiet ferrule-lua ferrule-cors ferrule-allow ferrule-basic ferrule-gzip ferrule-tcp static lua-floor balancer-floor static-bare)
declare -A PORT=([ferrule]=$FHTTP [ferrule-tcp]=$FTCP [ferrule-nometrics]=$NHTTP [ferrule-quiet]=$QHTTP [ferrule-lua]=$LHTTP [ferrule-cors]=$FHTTP [ferrule-allow]=$FHTTP [ferrule-basic]=$FHTTP [ferrule-gzip]=$GHTTP [static]=$SPORT [static-bare]=$BAREPORT [lua-floor]=$FLOORPORT [balancer-floor]=$BALFLOORPORT)
# What each target's requests carry besides Host: bench.test.
declare -A HEADERS=([ferrule-cors]="Host: cors.test|Origin: https://app.example" [ferrule-allow]="Host: allow.test" [ferrule-basic]="Host: basic.test|$BASIC_AUTH" [ferrule-gzip]="Host: bench.test|Accept-Encoding: gzip")
declare -A MASTER=([ferrule]="$F/nginx/run/nginx.pid" [ferrule-tcp]="$F/nginx/run/nginx.pid" [ferrule-nometrics]="$FN/nginx/run/nginx.pid" [ferrule-quiet]="$FQ/nginx/run/nginx.pid" [ferrule-lua]="$FL/nginx/run/nginx.pid" [ferrule-cors]="$F/nginx/run/nginx.pid" [ferrule-allow]="$F/nginx/run/nginx.pid" [ferrule-basic]="$F/nginx/run/nginx.pid" [ferrule-gzip]="$FG/nginx/run/nginx.pid" [static]="$WORK/static/logs/nginx.pid"
    [static-bare]="$WORK/bare/logs/nginx.pid" [lua-floor]="$WORK/floor/logs/nginx.pid"
    [balancer-floor]="$WORK/balfloor/logs/nginx.pid")
# CPU ticks (utime + stime) of the workers of the NGINX serving target $1.
worker_ticks() {
    local t=0 p
    for p in $(workers_of "${MASTER[$1]}"); do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    echo "$t"
}
HZ=$(getconf CLK_TCK)
ROWS=$WORK/rows
: > "$ROWS"
# measure KEY NAME...: wrk against every named target at once (one in sequential mode,
# static and one other in paired mode); appends "KEY name rps us_per_request" to $ROWS
# (KEY 0 = warm-up, not recorded). Fails on any error response.
measure() {
    local key=$1 name n rps us pids=()
    shift
    declare -A c0
    for name; do c0[$name]=$(worker_ticks "$name"); done
    local perfpids=()
    if [ "${PERF:-0}" = 1 ] && [ "$key" != 0 ]; then
        # a sampling profile of each target's workers during its run (PERF=1 below)
        for name; do
            perf record -q -e cpu-clock -F "$PERF_HZ" -o "$WORK/perf.$key.$name.data" \
                -p "$(workers_of "${MASTER[$name]}" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')" \
                > /dev/null 2>&1 &
            perfpids+=($!)
        done
    fi
    for name; do
        local hs=() h
        IFS='|' read -ra hs <<< "${HEADERS[$name]:-Host: bench.test}"
        local args=()
        for h in "${hs[@]}"; do args+=(-H "$h"); done
        "${WRK[@]}" -t"$THREADS" -c"$CONNS" -d"${RUN_FOR:-$DURATION}" "${args[@]}" \
            "http://127.0.0.1:${PORT[$name]}/" > "$WORK/wrk.$name" &
        pids+=($!)
    done
    wait "${pids[@]}"
    [ ${#perfpids[@]} = 0 ] || { kill -INT "${perfpids[@]}"; wait "${perfpids[@]}" || true; }
    for name; do
        if grep -qE 'Non-2xx|Socket errors' "$WORK/wrk.$name"; then
            echo "$name: errors during the run:" >&2
            cat "$WORK/wrk.$name" >&2
            exit 1
        fi
        n=$(awk '/requests in/{print $1}' "$WORK/wrk.$name")
        [ ${#perfpids[@]} = 0 ] || echo "$n" > "$WORK/perf.$key.$name.requests"
        rps=$(awk '/^Requests\/sec:/{print $2}' "$WORK/wrk.$name")
        us=$(awk -v c=$(($(worker_ticks "$name") - c0[$name])) -v n="$n" -v hz="$HZ" \
            'BEGIN{printf "%.1f", c / hz * 1e6 / n}')
        [ "$key" = 0 ] || echo "$key $name $rps $us" >> "$ROWS"
        log "$key $name: $rps req/s, $us us CPU/request"
    done
}

log "warm-up"
for name in "${TARGETS[@]}"; do RUN_FOR=2s measure 0 "$name"; done
for r in $(seq "$ROUNDS"); do
    for name in "${TARGETS[@]}"; do
        if [ "$MODE" = paired ]; then
            [ "$name" = static ] || measure "$r-$name" static "$name"
        else
            measure "$r" "$name"
        fi
    done
done

summary=$(python3 - "$ROWS" <<PY
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
rps, us = collections.defaultdict(dict), collections.defaultdict(dict)
for r, name, a, b in rows:
    rps[name][r], us[name][r] = float(a), float(b)
def med(d): return statistics.median(d.values())
# ratios against static measured in the same round (paired: at the same time), then
# the median over rounds: noise between rounds cancels
def ratio(name, d, inverse=False):
    v = [(d["static"][r] / d[name][r]) if inverse else (d[name][r] / d["static"][r]) for r in d[name]]
    return statistics.median(v)
print("throughput ($(date -u +%FT%TZ); wrk -t$THREADS -c$CONNS -d$DURATION keepalive, $ROUNDS rounds, $MODE, medians; proxy workers: $PROXY_WORKERS; pinned: $PIN; load average $(cut -d' ' -f1-3 /proc/loadavg))")
# a copy with fewer TARGETS (an A/B run) reports only what it measured
measured = lambda *names: all(n in rps for n in names)
for name in ["ferrule", "ferrule-nometrics", "ferrule-quiet", "ferrule-lua", "ferrule-cors", "ferrule-allow", "ferrule-basic", "ferrule-gzip", "ferrule-tcp", "static", "lua-floor", "balancer-floor", "static-bare"]:
    if measured(name):
        print(f"  {name:<15} {med(rps[name]):9.0f} req/s  {med(us[name]):6.1f} us CPU/req   "
              f"vs static: req/s x{ratio(name, rps):.3f}, CPU x{ratio(name, us, True):.3f}")
def goal(what, a, b, at):
    # a against b, each against static of its own round, then the ratio of those
    r = ratio(a, rps) / ratio(b, rps)
    c = ratio(a, us, True) / ratio(b, us, True)
    if at is None:
        print(f"  {what}: req/s x{r:.3f}, by CPU per request x{c:.3f}")
        return
    verdict = "goal met" if min(r, c) >= at else ("GOAL MISSED" if max(r, c) < at else "borderline")
    print(f"  {what}: req/s x{r:.3f}, by CPU per request x{c:.3f} ({verdict}, goal >= {at:.2f})")
if measured("ferrule"):
    goal("ferrule / static", "ferrule", "static", 0.95)
if measured("ferrule", "ferrule-nometrics"):
    goal("metrics on / off (ferrule / ferrule-nometrics)", "ferrule", "ferrule-nometrics", 0.98)
if measured("ferrule", "ferrule-quiet"):
    goal("access log and metrics on / off (ferrule / ferrule-quiet)", "ferrule", "ferrule-quiet", None)
if measured("ferrule", "static-bare"):
    goal("the defaults / a bare proxy (ferrule / static-bare)", "ferrule", "static-bare", 0.90)
for name, what in [("ferrule-cors", "CORS on"), ("ferrule-allow", "an allowlist"), ("ferrule-basic", "basic auth"), ("ferrule-gzip", "gzip on"), ("ferrule-tcp", "a TCP service")]:
    if measured(name):
        print(f"  {what} / static: req/s x{ratio(name, rps):.3f}, by CPU per request x{ratio(name, us, True):.3f}")
PY
)
if [ "${PERF:-0}" = 1 ]; then
    # Where each target's worker time goes: perf samples per request, by library,
    # summed over rounds (kernel time is mostly loopback TCP, the same work for all).
    for f in "$WORK"/perf.*.data; do
        perf report -i "$f" --no-children --sort dso -q -g none -n 2>/dev/null |
            awk -v f="$(basename "$f" .data)" 'NF >= 3 {print f, $2, $3}'
    done > "$WORK/perf.dso"
    summary+=$'\n'$(python3 - "$WORK" "$PERF_HZ" <<'PY'
import collections, glob, os, sys
work, hz = sys.argv[1], int(sys.argv[2])
reqs, samples = collections.Counter(), collections.defaultdict(collections.Counter)
for f in glob.glob(f"{work}/perf.*.requests"):
    key, name = os.path.basename(f)[5:-9].split(".", 1)
    reqs[name] += int(open(f).read())
def part(dso):
    if dso.startswith("[kernel"): return "kernel"
    if dso.startswith("[JIT]") or "luajit" in dso or "lua_module" in dso: return "lua"
    return {"nginx": "nginx", "libc.so.6": "libc", "libcrypto.so.3": "crypto"}.get(dso, "other")
for line in open(f"{work}/perf.dso"):
    f, n, dso = line.split(None, 2)
    name = f[5:].split(".", 1)[1]
    samples[name][part(dso.strip())] += int(n)
parts = ["kernel", "nginx", "lua", "libc", "crypto", "other"]
print(f"worker CPU per request by library, us (perf cpu-clock samples at {hz} Hz):")
print("  " + f"{'target':<15}" + "".join(f"{p:>8}" for p in parts) + f"{'total':>8}")
for name in ["static", "balancer-floor", "lua-floor", "ferrule-lua", "ferrule-quiet", "ferrule-nometrics", "ferrule", "static-bare"]:
    if reqs[name]:
        per = {p: samples[name][p] / hz * 1e6 / reqs[name] for p in parts}
        print("  " + f"{name:<15}" + "".join(f"{per[p]:8.3f}" for p in parts) + f"{sum(per.values()):8.3f}")
PY
)
fi
echo "$summary"
[ -n "$OUT" ] && echo "$summary" >> "$OUT"
exit 0
