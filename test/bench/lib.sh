# Shared helpers of the benchmark scripts (sourced).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NGINX=${NGINX:-nginx}
FERRULE=${FERRULE:-$ROOT/target/release/ferrule}
MODULES=${MODULES:-/usr/lib/nginx/modules}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }

# build_ferrule: release build unless FERRULE points at an existing binary.
build_ferrule() {
    if [ "${SKIP_BUILD:-0}" != 1 ]; then
        log "cargo build --release --bin ferrule"
        (cd "$ROOT" && cargo build --release --bin ferrule >&2)
    fi
    [ -x "$FERRULE" ] || { echo "no ferrule binary at $FERRULE" >&2; exit 1; }
}

# start_nginx PREFIX: runs nginx -p PREFIX -c conf/nginx.conf in the background.
start_nginx() {
    local p=$1
    mkdir -p "$p/logs" "$p/tmp"
    "$NGINX" -p "$p" -c "$p/conf/nginx.conf" -t -q
    "$NGINX" -p "$p" -c "$p/conf/nginx.conf" &
    local pid=$!
    echo "$pid" > "$p/master.pid"
    for _ in $(seq 50); do
        [ -s "$p/logs/nginx.pid" ] && return 0
        sleep 0.1
    done
    echo "nginx in $p did not start" >&2
    cat "$p/logs/error.log" >&2 || true
    exit 1
}

stop_nginx() {
    local p=$1
    [ -s "$p/master.pid" ] || return 0
    kill -QUIT "$(cat "$p/master.pid")" 2>/dev/null || true
    wait "$(cat "$p/master.pid")" 2>/dev/null || true
    rm -f "$p/master.pid"
}

# write_backend PREFIX PORT ADDRS...: a static NGINX answering a fixed body that names
# the address it was reached on (the "echo" backend of the benchmarks).
write_backend() {
    local p=$1 port=$2; shift 2
    mkdir -p "$p/conf"
    {
        echo "worker_processes ${BACKEND_WORKERS:-1};"
        echo "pid $p/logs/nginx.pid; error_log $p/logs/error.log warn; daemon off;"
        echo "events { worker_connections 16384; }"
        echo "http {"
        echo "  access_log off; keepalive_requests 100000;"
        echo "  client_body_temp_path $p/tmp/cb; proxy_temp_path $p/tmp/px;"
        echo "  fastcgi_temp_path $p/tmp/fc; uwsgi_temp_path $p/tmp/uw; scgi_temp_path $p/tmp/sc;"
        echo "  server {"
        for a in "$@"; do echo "    listen $a:$port reuseport;"; done
        echo "    default_type text/plain;"
        echo "    location / { return 200 \"\$server_addr:\$server_port ferrule-bench-body-0123456789abcdef\\n\"; }"
        echo "  }"
        echo "}"
    } > "$p/conf/nginx.conf"
}

# wait_http URL HOST EXPECT: waits (10 s) until the body of GET URL (Host: HOST) contains EXPECT.
wait_http() {
    for _ in $(seq 200); do
        if curl -s -m 1 -H "Host: $2" "$1" 2>/dev/null | grep -q -- "$3"; then return 0; fi
        sleep 0.05
    done
    echo "timeout waiting for $1 (Host $2) to answer $3" >&2
    return 1
}

# wait_ready STATUS_PORT: waits (timeout $READY_TIMEOUT s, default 120) for /readyz.
wait_ready() {
    local n=$(( ${READY_TIMEOUT:-120} * 10 ))
    for _ in $(seq "$n"); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz")" = 200 ] && return 0
        sleep 0.1
    done
    echo "ferrule not ready" >&2
    return 1
}

# start_ferrule DIR MANIFESTS HTTP HTTPS STATUS [extra flags...]
start_ferrule() {
    local d=$1 man=$2 http=$3 https=$4 status=$5; shift 5
    RUST_LOG=${RUST_LOG:-info} NO_COLOR=1 "$FERRULE" run --manifests "$man" \
        --nginx-prefix "$d/nginx" --nginx-modules "$MODULES" \
        --listen-address 127.0.0.1 --http-port "$http" --https-port "$https" \
        --status-address 127.0.0.1 --status-port "$status" --allow-local-endpoints "$@" \
        > "$d/ferrule.log" 2>&1 &
    echo $! > "$d/ferrule.pid"
}

stop_ferrule() {
    local d=$1
    [ -s "$d/ferrule.pid" ] || return 0
    kill -TERM "$(cat "$d/ferrule.pid")" 2>/dev/null || true
    wait "$(cat "$d/ferrule.pid")" 2>/dev/null || true
    rm -f "$d/ferrule.pid"
}

machine() {
    printf '%s, %s cores (%s), %s RAM, %s, %s' \
        "$(. /etc/os-release && echo "$PRETTY_NAME")" "$(nproc)" \
        "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" \
        "$(free -h | awk '/^Mem:/{print $2}')" \
        "$("$NGINX" -v 2>&1 | sed 's/.*: //')" "$(wrk -v 2>&1 | head -1 | awk '{print $1, $2}')"
}
