# Shared scaffolding of the in-NGINX balancer suites (lua/test/run.sh and
# njs/test/run.sh): a private nginx in a temporary prefix, running the
# configuration `ferrule render` writes, checks and their report, and the
# curl/openssl helpers both suites drive it with. Sourced after
# `set -uo pipefail`; the suite sets the *_PORT variables named in PORT_VARS.

NGINX=${NGINX:-nginx}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The controller binary that renders the configuration: where `make test` leaves
# it (`cargo test --workspace` builds target/debug/ferrule), or FERRULE=path.
FERRULE=${FERRULE:-$REPO/target/debug/ferrule}
START=$(date +%s)
MASTER=""

# require TOOL...: exits 2 naming the first tool that is missing.
require() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "FATAL: $tool not found" >&2; exit 2; }
    done
}

# new_prefix NAME: a temporary prefix in $WORK, removed at exit (KEEP=1 keeps it).
new_prefix() {
    WORK=$(mktemp -d "/tmp/ferrule-$1-test.XXXXXX")
    # Run as root, the rendered configuration has its workers run as nobody: they
    # open their temporary files and state below the prefix, which mktemp made 0700.
    chmod 755 "$WORK"
    mkdir -p "$WORK"/{conf,run,logs,tmp,certs,out}
    trap cleanup EXIT
    trap 'exit 130' INT TERM
}

# for_workers PATH...: copies these paths of the repository (relative to its root)
# below the prefix and prints where: the workers run as nobody, who may not be able
# to reach the checkout itself (a clone below /root, whose mode is 0700).
for_workers() {
    local root p
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    for p in "$@"; do
        mkdir -p "$WORK/repo/$(dirname "$p")"
        cp -r "$root/$p" "$WORK/repo/$p"
    done
    chmod -R a+rX "$WORK/repo"
    echo "$WORK/repo"
}

stop_nginx() {
    if [ -n "$MASTER" ] && kill -0 "$MASTER" 2>/dev/null; then
        kill -QUIT "$MASTER" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$MASTER" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$MASTER" 2>/dev/null && kill -KILL "$MASTER" 2>/dev/null
        wait "$MASTER" 2>/dev/null   # our child (daemon off): reaped
    fi
    MASTER=""
}
cleanup() {
    stop_nginx
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}

PASS=0
FAIL=0
FAILED=()
pass() { PASS=$((PASS + 1)); echo "  ok   $1"; }
fail() { FAIL=$((FAIL + 1)); FAILED+=("$1"); echo "  FAIL $1" >&2; }
check() { # check "description" test-command...
    local what=$1; shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}
section() { echo "== $1"; }

# report: the summary line; exits 1 with the failed checks and the error.log tail.
report() {
    echo
    echo "summary: $PASS passed, $FAIL failed, $(( $(date +%s) - START ))s"
    if [ "$FAIL" -gt 0 ]; then
        printf '  failed: %s\n' "${FAILED[@]}" >&2
        echo "error.log tail:" >&2
        grep -v 'connect() failed (111' "$WORK/logs/error.log" | tail -n 20 >&2
        exit 1
    fi
}

# free_ports N: N distinct free loopback ports (all held while choosing).
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks, ports = [], []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s); ports.append(s.getsockname()[1])
print(*ports)
EOF
}

mkcert() { # mkcert name CN [extra openssl args]
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj "/CN=$2" -keyout "$WORK/certs/$1.key" -out "$WORK/certs/$1.crt" "${@:3}" 2>/dev/null
}
# common_certs: the static fallback (conf/default.*: what the njs configuration
# serves, and a pair the Lua unit tests post) and the certificates both suites
# post: a, a2 (same host, serial 4242), wild, dflt. After render_prefix, whose
# default certificate it replaces.
common_certs() {
    mkcert fallback static-fallback
    cp "$WORK/certs/fallback.crt" "$WORK/conf/default.crt"
    cp "$WORK/certs/fallback.key" "$WORK/conf/default.key"
    mkcert a a.example.com
    mkcert a2 a.example.com -set_serial 4242
    mkcert wild '*.w.example.com'
    mkcert dflt ferrule-default
}

# render_conf TEMPLATE [sed args]: TEMPLATE with PREFIX and every port in PORT_VARS
# filled in.
render_conf() {
    local template=$1 v args=(-e "s#PREFIX#$WORK#g")
    shift
    for v in $PORT_VARS; do args+=(-e "s#$v#${!v}#g"); done
    sed "${args[@]}" "$@" "$template"
}

# render_prefix MANIFESTS [ferrule render flags]: $WORK as `ferrule render` writes it
# from MANIFESTS (nginx.conf, servers, balancer sources, token, default
# certificate), proxying on 127.0.0.1 at PROXY_PORT and TLS_PORT with 2 workers;
# its http block includes conf/test-only.conf, which the suite writes.
render_prefix() {
    local manifests=$1 conf="$WORK/conf/nginx.conf" newer
    shift
    if [ ! -x "$FERRULE" ]; then
        echo "FATAL: no ferrule binary at $FERRULE: build it (cargo build --bin ferrule;" \
             "make test runs cargo test --workspace first) or set FERRULE=/path/to/ferrule" >&2
        exit 2
    fi
    newer=$(find "$REPO/rootfs/etc/nginx" "$REPO/controller/src" "$REPO/model/src" \
                 -newer "$FERRULE" -type f -print -quit 2>/dev/null)
    [ -z "$newer" ] || echo "WARNING: $newer is newer than $FERRULE: rebuild it" \
                            "to test what this tree renders" >&2
    if ! "$FERRULE" render --manifests "$manifests" --out "$WORK" --nginx-binary "$NGINX" \
            --listen-address 127.0.0.1 --http-port "$PROXY_PORT" --https-port "$TLS_PORT" \
            --worker-processes 2 "$@" > "$WORK/logs/render.out" 2>&1; then
        echo "FATAL: ferrule render failed:" >&2; cat "$WORK/logs/render.out" >&2; exit 1
    fi
    # The one change to what the renderer wrote: the test-only file included right
    # after the servers (a text insertion: the renderer has no include of its own,
    # and a ConfigMap http-snippet would change every location it renders).
    sed -i 's#^\( *\)include "[^"]*/conf/servers/\*\.conf";$#&\n\1include "'"$WORK"'/conf/test-only.conf";#' "$conf"
    if [ "$(grep -c '/conf/test-only.conf";$' "$conf")" != 1 ]; then
        echo "FATAL: the servers' include was not found once in the rendered $conf" >&2; exit 1
    fi
}

# test_and_start: nginx -t on conf/nginx.conf (fatal when it fails), then start_nginx.
test_and_start() {
    if ! "$NGINX" -p "$WORK" -c conf/nginx.conf -e "$WORK/logs/error.log" -t >"$WORK/logs/t.out" 2>&1; then
        echo "FATAL: nginx -t failed:" >&2; cat "$WORK/logs/t.out" >&2; exit 1
    fi
    start_nginx
    echo "nginx master $MASTER, prefix $WORK, proxy :$PROXY_PORT tls :$TLS_PORT"
}
# start_nginx: starts the master and waits for its API socket and both workers.
# The rendered configuration says `daemon off` (the controller supervises the
# master): it runs in the background, a child of this shell.
start_nginx() {
    local pid
    "$NGINX" -p "$WORK" -c conf/nginx.conf -e "$WORK/logs/error.log" >> "$WORK/logs/nginx.out" 2>&1 &
    pid=$!
    for _ in $(seq 50); do
        [ -s "$WORK/run/nginx.pid" ] && [ -S "$WORK/run/balancer.sock" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    MASTER=$(cat "$WORK/run/nginx.pid" 2>/dev/null)
    if [ -z "$MASTER" ]; then
        MASTER=$pid   # stopped at exit if it runs after all
        echo "FATAL: nginx did not start" >&2; cat "$WORK/logs/nginx.out" "$WORK/logs/error.log" >&2; exit 1
    fi
    for _ in $(seq 50); do [ "$(workers | wc -w)" = 2 ] && break; sleep 0.1; done
    SOCK="$WORK/run/balancer.sock"
    PROXY="http://127.0.0.1:$PROXY_PORT"
    B=$BACKEND_PORT
}
workers() { ps -o pid= --ppid "$MASTER" | sort | tr -d ' ' | tr '\n' ' '; }
# wait_new_workers OLD: after a HUP, until two workers run and none of OLD is left.
wait_new_workers() {
    local now
    for _ in $(seq 50); do
        now=$(workers); [ "$(echo $now | wc -w)" = 2 ] &&
            ! echo "$now" | grep -qwFf <(echo "$1" | tr ' ' '\n' | grep .) && break
        sleep 0.1
    done
}

# api METHOD PATH [BODY] -> prints the status; body in $WORK/out/api
api() {
    local args=(-s -o "$WORK/out/api" -w '%{http_code}' --unix-socket "$SOCK"
                -H "Authorization: Bearer $TOKEN" -X "$1")
    [ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
    curl "${args[@]}" "http://ferrule$2"
}
# version_now: the raw GET /configuration/version answer.
version_now() { curl -s --unix-socket "$SOCK" -H "Authorization: Bearer $TOKEN" http://x/configuration/version; }
# hits URL-with-glob [curl args] -> identity lines ("addr:port ...") into $WORK/out/hits
hits() { local u=$1; shift; curl -s "$@" "$PROXY$u" > "$WORK/out/hits"; }
count() { grep -c "^$1 " "$WORK/out/hits"; }
distinct() { awk '{print $1}' "$WORK/out/hits" | sort -u | wc -l; }
total() { wc -l < "$WORK/out/hits"; }
between() { [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
ep() { printf '{"address":"%s","port":%s}' "$1" "$2"; }
spread() { awk '{print $1}' "$WORK/out/hits" | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}'; }

# probe_api_via_proxy: sends API requests (with the token) to the plain proxy port
# under many Host/path spellings; LEAK=1 (and a line each) for any answer that is
# neither an echo backend nor nginx's own 400.
probe_api_via_proxy() {
    local host path out
    LEAK=0
    for host in example.com localhost ferrule unix: 127.0.0.1 "unix:$SOCK" x.w.example.com; do
        for path in /configuration/backends /configuration/version //configuration/backends \
                    /configuration/../configuration/backends /configuration/backends/rr; do
            out=$(curl -s --path-as-is -H "Host: $host" -H "Authorization: Bearer $TOKEN" "$PROXY$path")
            case "$out" in
                127.0.0.*|::1*) ;;                  # an echo backend answered
                *'400 Bad Request'*) ;;             # nginx rejected an invalid Host
                *) LEAK=1; echo "    Host '$host' $path -> $out" ;;
            esac
        done
    done
    out=$(curl -s -H "Host;" -H "Authorization: Bearer $TOKEN" "$PROXY/configuration/version")
    case "$out" in *'400 Bad Request'*) ;; *) LEAK=1; echo "    no Host header -> $out" ;; esac
    out=$(curl -s -X POST -H "Authorization: Bearer $TOKEN" --data-binary '{"version":99,"removed":["rr"]}' "$PROXY/configuration/backends")
    case "$out" in 127.0.0.*|::1*) ;; *) LEAK=1; echo "    POST via proxy -> $out" ;; esac
}

subject() { # subject SNI|"" -> "CN=... serial=..."
    local sni=(-servername "$1"); [ -z "$1" ] && sni=(-noservername)
    echo | timeout 5 openssl s_client -connect "127.0.0.1:$TLS_PORT" "${sni[@]}" 2>/dev/null |
        openssl x509 -noout -subject -serial 2>/dev/null | sed -E 's/^subject=//; s/ = /=/g' | tr '\n' ' '
}
jcerts() { # jcerts version [host=name | rm=host | default=name]... -> JSON
    python3 - "$WORK/certs" "$@" <<'EOF'
import json, sys
d, version, rest = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
out = {"version": version, "certificates": [], "removed": []}
for item in rest:
    kind, _, val = item.partition("=")
    if kind == "rm":
        out["removed"].append(val)
    else:
        pem = {"cert": open(f"{d}/{val}.crt").read(), "key": open(f"{d}/{val}.key").read()}
        if kind == "default":
            out["default"] = pem
        else:
            out["certificates"].append(dict(host=kind, **pem))
print(json.dumps(out))
EOF
}

# big_backends FILE: a POST body with 10,000 backends of 3 endpoints each.
big_backends() {
    python3 - > "$1" <<'EOF'
import json
print(json.dumps({"version": 100, "backends": [
    {"name": f"ns{i // 100}-svc{i}-80", "load_balance": "round_robin",
     "endpoints": [{"address": f"10.{i // 250}.{i % 250}.{j}", "port": 8080} for j in (1, 2, 3)]}
    for i in range(10000)]}))
EOF
}
