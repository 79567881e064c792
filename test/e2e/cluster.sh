#!/usr/bin/env bash
# Ferrule end-to-end cluster: a real etcd + kube-apiserver on loopback.
#
# No kubelet, no controller-manager, no scheduler: enough for a controller that
# watches Ingresses, IngressClasses, Services, EndpointSlices, Secrets and
# ConfigMaps and writes statuses/events/leases. See test/e2e/README.md.
#
# Usage: test/e2e/cluster.sh up|down|status|env|restart-apiserver|
#                           stop-apiserver|start-apiserver|build|reset
set -euo pipefail

# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$SCRIPT_DIR/../.." && pwd -P)
E2E_DIR=${FERRULE_E2E_DIR:-$ROOT/target/e2e}

# Pinned versions. The Kubernetes staging modules (k8s.io/api, ...) are
# published as v0.<minor>.<patch> for Kubernetes v1.<minor>.<patch>.
K8S_VERSION=${FERRULE_E2E_K8S_VERSION:-v1.35.4}
ETCD_VERSION=${FERRULE_E2E_ETCD_VERSION:-v3.6.16}
STAGING_VERSION=v0.${K8S_VERSION#v1.}

CACHE_ROOT=${FERRULE_E2E_CACHE:-${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}/.cache/ferrule-e2e}
CACHE_DIR=$CACHE_ROOT/k8s-$K8S_VERSION-etcd-$ETCD_VERSION
BIN_DIR=$CACHE_DIR/bin
BUILD_DIR=$CACHE_DIR/build

PKI=$E2E_DIR/pki
ETCD_DATA=$E2E_DIR/etcd
STATE=$E2E_DIR/state.env
KUBECONFIG_FILE=$E2E_DIR/kubeconfig
ENV_FILE=$E2E_DIR/env
ETCD_LOG=$E2E_DIR/etcd.log
APISERVER_LOG=$E2E_DIR/kube-apiserver.log
ETCD_PID=$E2E_DIR/etcd.pid
APISERVER_PID=$E2E_DIR/kube-apiserver.pid

READY_TIMEOUT=${FERRULE_E2E_READY_TIMEOUT:-120}
SERVICE_CIDR=10.96.0.0/16

if [[ -n ${GO:-} ]]; then :
elif command -v go >/dev/null 2>&1; then GO=$(command -v go)
else GO=/usr/local/go/bin/go
fi

log() { printf '[e2e] %s\n' "$*" >&2; }
die() { printf '[e2e] ERROR: %s\n' "$*" >&2; exit 1; }

need() {
    local t
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || die "required tool '$t' not found (apt-get install it)"
    done
}

# ---------------------------------------------------------------------------
# Locking: one fd for this work dir (up/down/restart), one for the shared
# binary cache (several work trees may share it). Daemons never inherit them.
# ---------------------------------------------------------------------------
take_lock() {
    mkdir -p "$E2E_DIR"
    exec 9>"$E2E_DIR/.lock"
    if ! flock -n 9; then
        log "another cluster.sh holds $E2E_DIR/.lock; waiting..."
        flock 9
    fi
}

# ---------------------------------------------------------------------------
# Building the binaries (first use only)
# ---------------------------------------------------------------------------
# Built from k8s.io/kubernetes (cmd/NAME); etcd and helm come from their own modules.
KUBE_BINARIES=(kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy)
HELM_VERSION=${FERRULE_E2E_HELM_VERSION:-v3.22.0}

missing_kube_binaries() {
    local b
    for b in "${KUBE_BINARIES[@]}"; do
        [[ -x $BIN_DIR/$b ]] || printf '%s\n' "$b"
    done
}

have_binaries() {
    [[ -z $(missing_kube_binaries) && -x $BIN_DIR/etcd && -x $BIN_DIR/helm ]]
}

# Runs a go command in a build dir, output to a log; on failure prints the
# go error (without the 'go: downloading' noise) and exits non-zero.
run_go() {
    local dir=$1 logfile=$2; shift 2
    if ! (cd "$dir" && nice -n 10 "$GO" "$@") >>"$logfile" 2>&1; then
        # shellcheck disable=SC2016 # literal backquotes
        printf '[e2e] ERROR: `go %s` failed in %s; go said:\n' "$*" "$dir" >&2
        grep -v '^go: downloading ' "$logfile" | tail -n 80 >&2
        die "build failed (full log: $logfile)"
    fi
}

build_kube() { # NAMES... (cmd/NAME in k8s.io/kubernetes)
    local dir=$BUILD_DIR/kube logfile=$BUILD_DIR/kube.log modfile b
    local -a pkgs=() gets=()
    for b in "$@"; do
        pkgs+=("k8s.io/kubernetes/cmd/$b")
        gets+=("k8s.io/kubernetes/cmd/$b@$K8S_VERSION")
    done
    rm -rf "$dir" && mkdir -p "$dir/out"
    : >"$logfile"
    printf 'module ferrule-e2e/bootstrap\n\ngo 1.25.0\n' >"$dir/go.mod"
    # Fetch kubernetes' own go.mod to learn which k8s.io modules it maps to
    # ./staging/src/...; each of those is replaced by its published version.
    run_go "$dir" "$logfile" mod download -json "k8s.io/kubernetes@$K8S_VERSION"
    modfile=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p' "$logfile" | tail -n 1)
    [[ -f $modfile ]] || die "could not locate go.mod of k8s.io/kubernetes@$K8S_VERSION (see $logfile)"
    local goline godebug
    goline=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$modfile" | head -n 1)
    godebug=$(sed -n 's/^godebug \(.*\)$/\1/p' "$modfile" | head -n 1)
    {
        printf 'module ferrule-e2e/kube-tools\n\ngo %s\n\n' "${goline:-1.25.0}"
        [[ -n $godebug ]] && printf 'godebug %s\n\n' "$godebug"
        printf 'require k8s.io/kubernetes %s\n\n' "$K8S_VERSION"
        printf 'replace (\n'
        awk -v v="$STAGING_VERSION" '{ if ($1 == "replace") { $1 = ""; $0 = $0 } }
            $2 == "=>" && $3 ~ /^\.\/staging\/src\// { printf "\t%s => %s %s\n", $1, $1, v }' "$modfile"
        printf ')\n'
    } >"$dir/go.mod"
    grep -q '=> k8s.io/api ' "$dir/go.mod" || die "no staging replaces found in $modfile"
    log "  $(grep -c ' => ' "$dir/go.mod") staging modules pinned to $STAGING_VERSION"
    run_go "$dir" "$logfile" get "${gets[@]}"
    # Same version stamping as kubernetes' hack/lib/version.sh, so /version and
    # `kubectl version` report the real release instead of v0.0.0-master.
    local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    local ld="-s -w" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ld+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    run_go "$dir" "$logfile" build -trimpath "-ldflags=$ld" -o "$dir/out/" "${pkgs[@]}"
    for b in "$@"; do
        mv -f "$dir/out/$b" "$BIN_DIR/$b"
    done
}

# helm from helm.sh/helm/v3 in a scratch module, version stamped like helm's Makefile.
build_helm() {
    local dir=$BUILD_DIR/helm logfile=$BUILD_DIR/helm.log
    rm -rf "$dir" && mkdir -p "$dir/out"
    : >"$logfile"
    printf 'module ferrule-e2e/helm-tools\n\ngo 1.25.0\n' >"$dir/go.mod"
    run_go "$dir" "$logfile" get "helm.sh/helm/v3@$HELM_VERSION"
    run_go "$dir" "$logfile" build -trimpath \
        "-ldflags=-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
        -o "$dir/out/helm" helm.sh/helm/v3/cmd/helm
    mv -f "$dir/out/helm" "$BIN_DIR/helm"
}

build_etcd() {
    local dir=$BUILD_DIR/etcd logfile=$BUILD_DIR/etcd.log
    rm -rf "$dir" && mkdir -p "$dir/out"
    : >"$logfile"
    printf 'module ferrule-e2e/etcd-tools\n\ngo 1.25.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
        "$ETCD_VERSION" >"$dir/go.mod"
    run_go "$dir" "$logfile" get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    run_go "$dir" "$logfile" build -trimpath "-ldflags=-s -w" -o "$dir/out/etcd" go.etcd.io/etcd/server/v3
    mv -f "$dir/out/etcd" "$BIN_DIR/etcd"
}

ensure_binaries() {
    have_binaries && return 0
    mkdir -p "$BIN_DIR" "$BUILD_DIR"
    exec 8>"$CACHE_DIR/.build.lock"
    if ! flock -n 8; then
        log "another process is building into $CACHE_DIR; waiting..."
        flock 8
    fi
    if ! have_binaries; then
        [[ -x $GO ]] || command -v "$GO" >/dev/null 2>&1 || die "go not found (set GO=/path/to/go)"
        # Keep GOPATH/GOMODCACHE/GOCACHE at their defaults so they persist.
        export GOWORK=off GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS="${GOFLAGS:-} -mod=mod"
        local t0=$SECONDS
        log "building binaries into $BIN_DIR (first use; takes ~10-20 min on 2 cores)"
        log "  go: $("$GO" version)"
        if [[ ! -x $BIN_DIR/etcd ]]; then
            log "  etcd $ETCD_VERSION (go.etcd.io/etcd/server/v3)..."
            build_etcd
            log "  etcd built ($((SECONDS - t0)) s so far)"
        fi
        local -a missing
        mapfile -t missing < <(missing_kube_binaries)
        if ((${#missing[@]})); then
            log "  ${missing[*]} $K8S_VERSION (k8s.io/kubernetes)..."
            build_kube "${missing[@]}"
            log "  kubernetes binaries built ($((SECONDS - t0)) s so far)"
        fi
        if [[ ! -x $BIN_DIR/helm ]]; then
            log "  helm $HELM_VERSION (helm.sh/helm/v3)..."
            build_helm
        fi
        printf 'kubernetes %s\nstaging %s\netcd %s\nhelm %s\n%s\n' "$K8S_VERSION" "$STAGING_VERSION" \
            "$ETCD_VERSION" "$HELM_VERSION" "$("$GO" version)" >"$BIN_DIR/VERSIONS"
        log "build done in $((SECONDS - t0)) s"
    fi
    flock -u 8
    exec 8>&-
}

# ---------------------------------------------------------------------------
# PKI
# ---------------------------------------------------------------------------
sign_cert() { # name subject extfile-content
    local name=$1 subj=$2 ext=$3
    printf '%s\n' "$ext" >"$PKI/$name.ext"
    openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" \
        -out "$PKI/$name.csr" -subj "$subj" 2>/dev/null
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days 3650 -sha256 \
        -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
    rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

ensure_pki() {
    [[ -f $PKI/.complete ]] && return 0
    need openssl
    log "generating certificates in $PKI"
    rm -rf "$PKI" && mkdir -p "$PKI"
    (
        umask 077
        openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
            -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -subj "/CN=ferrule-e2e-ca" \
            -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
        sign_cert apiserver "/CN=kube-apiserver" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
        sign_cert admin "/O=system:masters/CN=ferrule-e2e-admin" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
        openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null
        openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    ) || die "openssl failed while generating $PKI"
    touch "$PKI/.complete"
}

# ---------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------
# pid_alive PIDFILE NAME: the pid in PIDFILE is a live (non-zombie) NAME process.
pid_alive() {
    local pidfile=$1 name=$2 pid state
    [[ -f $pidfile ]] || return 1
    pid=$(<"$pidfile")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/cmdline ]] || return 1
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    [[ $state != Z && -n $state ]] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" | head -n 1 | grep -q "/$name\$"
}

stop_process() { # PIDFILE NAME
    local pidfile=$1 name=$2 pid i
    if pid_alive "$pidfile" "$name"; then
        pid=$(<"$pidfile")
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            pid_alive "$pidfile" "$name" || break
            sleep 0.2
        done
        if pid_alive "$pidfile" "$name"; then
            log "$name did not stop in 20 s; killing"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.5
        fi
    fi
    rm -f "$pidfile"
}

# Starts a daemon detached from this shell: own session, stdio to the log,
# no inherited lock fds (so a caller capturing our output is not held open).
start_daemon() { # PIDFILE LOG BINARY ARGS...
    local pidfile=$1 logfile=$2; shift 2
    printf '=== %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >>"$logfile"
    rm -f "$pidfile"
    # shellcheck disable=SC2016 # expanded by the inner bash
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" \
        </dev/null >>"$logfile" 2>&1 8>&- 9>&- &
    local i
    for ((i = 0; i < 50; i++)); do
        [[ -s $pidfile ]] && return 0
        sleep 0.1
    done
    die "could not start $1 (see $logfile)"
}

port_in_use() { [[ -n $(ss -Htln "sport = :$1" 2>/dev/null) ]]; }

# A free loopback port below the ephemeral range, not in the given list.
free_port() {
    local p i
    for ((i = 0; i < 200; i++)); do
        p=$((20000 + RANDOM % 12000))
        [[ " $* " == *" $p "* ]] && continue
        port_in_use "$p" || { echo "$p"; return 0; }
    done
    die "no free port found"
}

load_state() {
    ETCD_CLIENT_PORT='' ETCD_PEER_PORT='' APISERVER_PORT=''
    # shellcheck disable=SC1090
    [[ -f $STATE ]] && source "$STATE"
    return 0
}

save_state() {
    printf 'ETCD_CLIENT_PORT=%s\nETCD_PEER_PORT=%s\nAPISERVER_PORT=%s\n' \
        "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" >"$STATE.tmp"
    mv -f "$STATE.tmp" "$STATE"
}

curl_api() { # PATH
    curl -sS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "https://127.0.0.1:$APISERVER_PORT$1"
}

etcd_healthy() {
    [[ -n ${ETCD_CLIENT_PORT:-} ]] && pid_alive "$ETCD_PID" etcd &&
        curl -sf --max-time 3 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" 2>/dev/null | grep -q '"health":"true"'
}

apiserver_healthy() {
    [[ -n ${APISERVER_PORT:-} ]] && pid_alive "$APISERVER_PID" kube-apiserver &&
        [[ $(curl_api /readyz 2>/dev/null) == ok ]]
}

fail_with_logs() { # MESSAGE LOGFILE
    printf '[e2e] ERROR: %s; last lines of %s:\n' "$1" "$2" >&2
    tail -n 40 "$2" >&2 || true
    exit 1
}

start_etcd() {
    # A fresh `up` gets a fresh, empty cluster.
    rm -rf "$ETCD_DATA" && mkdir -p "$ETCD_DATA" && chmod 700 "$ETCD_DATA"
    ETCD_CLIENT_PORT=$(free_port "${APISERVER_PORT:-}")
    ETCD_PEER_PORT=$(free_port "$ETCD_CLIENT_PORT" "${APISERVER_PORT:-}")
    save_state
    : >"$ETCD_LOG"
    log "starting etcd $ETCD_VERSION on 127.0.0.1:$ETCD_CLIENT_PORT"
    start_daemon "$ETCD_PID" "$ETCD_LOG" "$BIN_DIR/etcd" \
        --name=ferrule-e2e \
        --data-dir="$ETCD_DATA" \
        --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster="ferrule-e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster-state=new \
        --unsafe-no-fsync=true \
        --log-level=warn
    local deadline=$((SECONDS + 60))
    until etcd_healthy; do
        pid_alive "$ETCD_PID" etcd || fail_with_logs "etcd exited during startup" "$ETCD_LOG"
        ((SECONDS < deadline)) || fail_with_logs "etcd not healthy after 60 s" "$ETCD_LOG"
        sleep 0.2
    done
}

start_apiserver() {
    # Keep the port across restarts so kubeconfigs and clients stay valid.
    if [[ -z ${APISERVER_PORT:-} ]] || port_in_use "$APISERVER_PORT"; then
        APISERVER_PORT=$(free_port "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT")
    fi
    save_state
    write_client_files
    log "starting kube-apiserver $K8S_VERSION on https://127.0.0.1:$APISERVER_PORT"
    start_daemon "$APISERVER_PID" "$APISERVER_LOG" "$BIN_DIR/kube-apiserver" \
        --bind-address=127.0.0.1 \
        --advertise-address=127.0.0.1 \
        --endpoint-reconciler-type=none \
        --secure-port="$APISERVER_PORT" \
        --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$PKI/sa.pub" \
        --service-account-signing-key-file="$PKI/sa.key" \
        --client-ca-file="$PKI/ca.crt" \
        --tls-cert-file="$PKI/apiserver.crt" \
        --tls-private-key-file="$PKI/apiserver.key" \
        --cert-dir="$E2E_DIR/apiserver-certs" \
        --authorization-mode=RBAC \
        --service-cluster-ip-range="$SERVICE_CIDR" \
        --allow-privileged=true \
        --disable-admission-plugins=ServiceAccount \
        --profiling=false
    local deadline=$((SECONDS + READY_TIMEOUT))
    until apiserver_healthy; do
        pid_alive "$APISERVER_PID" kube-apiserver ||
            fail_with_logs "kube-apiserver exited during startup" "$APISERVER_LOG"
        if ((SECONDS >= deadline)); then
            log "/readyz said: $(curl_api '/readyz?verbose' 2>&1 | grep -v '^\[+\]' | tail -n 20)"
            fail_with_logs "kube-apiserver not ready after $READY_TIMEOUT s" "$APISERVER_LOG"
        fi
        sleep 0.5
    done
}

write_client_files() {
    local b64="base64 -w0" tmp
    tmp=$(mktemp "$E2E_DIR/.kubeconfig.XXXXXX")
    cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ferrule-e2e
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $($b64 <"$PKI/ca.crt")
users:
- name: ferrule-e2e-admin
  user:
    client-certificate-data: $($b64 <"$PKI/admin.crt")
    client-key-data: $($b64 <"$PKI/admin.key")
contexts:
- name: ferrule-e2e
  context:
    cluster: ferrule-e2e
    user: ferrule-e2e-admin
    namespace: default
current-context: ferrule-e2e
EOF
    chmod 600 "$tmp"
    mv -f "$tmp" "$KUBECONFIG_FILE"

    mkdir -p "$E2E_DIR/bin"
    local b
    for b in "${KUBE_BINARIES[@]}" etcd helm; do
        ln -sfn "$BIN_DIR/$b" "$E2E_DIR/bin/$b"
    done

    tmp=$(mktemp "$E2E_DIR/.env.XXXXXX")
    {
        printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_FILE"
        printf 'export FERRULE_E2E_APISERVER=%q\n' "https://127.0.0.1:$APISERVER_PORT"
        printf 'export FERRULE_E2E_ETCD=%q\n' "http://127.0.0.1:$ETCD_CLIENT_PORT"
        printf 'export FERRULE_E2E_KUBECTL=%q\n' "$E2E_DIR/bin/kubectl"
        printf 'export FERRULE_E2E_CA=%q\n' "$PKI/ca.crt"
    } >"$tmp"
    mv -f "$tmp" "$ENV_FILE"
}

# ---------------------------------------------------------------------------
# Subcommands
# ---------------------------------------------------------------------------
cmd_up() {
    need flock setsid curl ss base64
    take_lock
    load_state
    if etcd_healthy && apiserver_healthy && [[ -f $KUBECONFIG_FILE && -f $ENV_FILE ]]; then
        log "already up: https://127.0.0.1:$APISERVER_PORT (KUBECONFIG=$KUBECONFIG_FILE)"
        return 0
    fi
    local t0=$SECONDS
    ensure_binaries
    ensure_pki
    if ! etcd_healthy; then
        # The apiserver cannot outlive its etcd: start both from scratch.
        stop_process "$APISERVER_PID" kube-apiserver
        stop_process "$ETCD_PID" etcd
        start_etcd
    fi
    if ! apiserver_healthy; then
        stop_process "$APISERVER_PID" kube-apiserver
        start_apiserver
    fi
    write_client_files
    log "up in $((SECONDS - t0)) s: https://127.0.0.1:$APISERVER_PORT (KUBECONFIG=$KUBECONFIG_FILE)"
}

cmd_down() {
    take_lock
    stop_process "$APISERVER_PID" kube-apiserver
    stop_process "$ETCD_PID" etcd
    rm -f "$ENV_FILE"
}

require_etcd() {
    etcd_healthy || die "etcd is not running; run '$0 up' first"
}

cmd_stop_apiserver() {
    take_lock
    stop_process "$APISERVER_PID" kube-apiserver
}

cmd_start_apiserver() {
    need flock setsid curl ss base64
    take_lock
    load_state
    require_etcd
    apiserver_healthy && return 0
    ensure_binaries
    stop_process "$APISERVER_PID" kube-apiserver
    start_apiserver
    log "kube-apiserver ready on https://127.0.0.1:$APISERVER_PORT"
}

cmd_restart_apiserver() {
    need flock setsid curl ss base64
    take_lock
    load_state
    require_etcd
    local t0=$SECONDS
    stop_process "$APISERVER_PID" kube-apiserver
    ensure_binaries
    start_apiserver
    log "kube-apiserver restarted in $((SECONDS - t0)) s on https://127.0.0.1:$APISERVER_PORT"
}

cmd_status() {
    load_state
    local rc=0
    if pid_alive "$ETCD_PID" etcd; then
        if etcd_healthy; then echo "etcd:           running, healthy (pid $(<"$ETCD_PID"), http://127.0.0.1:$ETCD_CLIENT_PORT)"
        else echo "etcd:           running, NOT healthy (pid $(<"$ETCD_PID"))"; rc=1; fi
    else
        echo "etcd:           stopped"; rc=1
    fi
    if pid_alive "$APISERVER_PID" kube-apiserver; then
        if apiserver_healthy; then echo "kube-apiserver: running, ready (pid $(<"$APISERVER_PID"), https://127.0.0.1:$APISERVER_PORT)"
        else echo "kube-apiserver: running, NOT ready (pid $(<"$APISERVER_PID"))"; rc=1; fi
    else
        echo "kube-apiserver: stopped"; rc=1
    fi
    echo "kubeconfig:     $KUBECONFIG_FILE"
    echo "logs:           $ETCD_LOG $APISERVER_LOG"
    if have_binaries; then echo "binaries:       $BIN_DIR (cached)"
    else echo "binaries:       $BIN_DIR (not built yet)"; fi
    return $rc
}

cmd_env() {
    [[ -f $ENV_FILE ]] || die "cluster is not up (no $ENV_FILE); run '$0 up'"
    cat "$ENV_FILE"
}

cmd_build() {
    need flock
    ensure_binaries
    cat "$BIN_DIR/VERSIONS" 2>/dev/null || true
}

cmd_reset() {
    take_lock
    stop_process "$APISERVER_PID" kube-apiserver
    stop_process "$ETCD_PID" etcd
    find "$E2E_DIR" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
    log "removed everything under $E2E_DIR (binary cache $CACHE_DIR kept)"
}

usage() {
    cat <<EOF
usage: $0 COMMAND

  up                 build binaries on first use, start etcd + kube-apiserver, write
                     $E2E_DIR/{kubeconfig,env}; no-op when already up
  down               stop kube-apiserver and etcd (no-op when stopped)
  status             show process state (exit 0 only when both are healthy)
  env                print 'export KUBECONFIG=...' lines (eval "\$($0 env)")
  restart-apiserver  stop and start kube-apiserver only (same port, etcd kept)
  stop-apiserver     stop kube-apiserver only
  start-apiserver    start kube-apiserver again (etcd must be running)
  build              only build/cache the binaries
  reset              down + delete $E2E_DIR (keeps the binary cache)

versions: kubernetes $K8S_VERSION (staging $STAGING_VERSION), etcd $ETCD_VERSION
cache:    $CACHE_DIR
EOF
}

case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    restart-apiserver) cmd_restart_apiserver ;;
    stop-apiserver) cmd_stop_apiserver ;;
    start-apiserver) cmd_start_apiserver ;;
    build) cmd_build ;;
    reset) cmd_reset ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
esac
