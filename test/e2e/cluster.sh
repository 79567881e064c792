#!/usr/bin/env bash
# Ferrule end-to-end cluster: a real single-node Kubernetes, built from source.
#
# etcd + kube-apiserver, kube-controller-manager, kube-scheduler, and one node
# (ferrule-node): containerd (Debian's) with runc and the CNI bridge plugin, the
# kubelet and kube-proxy. Pods run images imported by `make image` (the sandbox
# image too); nothing is pulled. FERRULE_E2E_NODE=0 runs only etcd and the
# apiserver (on loopback), as before. See test/e2e/README.md.
#
# Usage: test/e2e/cluster.sh up|down|status|env|restart-apiserver|
#                           stop-apiserver|start-apiserver|build|reset|
#                           import FILE=IMAGE...
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

# The node. One per machine: the bridge, the pod CIDR and the netfilter rules of
# kube-proxy are the host's.
NODE=${FERRULE_E2E_NODE:-1}
NODE_NAME=ferrule-node
POD_CIDR=10.244.0.0/24
BRIDGE=ferrule0
# The bridge's address: the pods' gateway, the node's InternalIP and the address
# the apiserver advertises (the endpoint of the kubernetes Service).
NODE_IP=10.244.0.1
PAUSE_IMAGE=ferrule.local/pause:dev
CNI_BIN_DIR=${FERRULE_E2E_CNI_BIN:-/usr/lib/cni}
CONTAINERD=${FERRULE_E2E_CONTAINERD:-/usr/bin/containerd}
CTR=${FERRULE_E2E_CTR:-/usr/bin/ctr}
RUNC=${FERRULE_E2E_RUNC:-/usr/sbin/runc}
# Sockets and runtime state live under a short path (sun_path has 108 bytes),
# one per work dir.
RUN_DIR=/run/ferrule-e2e-$(printf '%s' "$E2E_DIR" | sha256sum | cut -c1-8)
CONTAINERD_SOCK=$RUN_DIR/containerd.sock
CONTAINERD_CONFIG=$E2E_DIR/containerd.toml
CONTAINERD_ROOT=$E2E_DIR/containerd
CNI_CONF_DIR=$E2E_DIR/cni
KUBELET_DIR=$E2E_DIR/kubelet
POD_LOGS=$E2E_DIR/pod-logs
CONTAINERD_LOG=$E2E_DIR/containerd.log
CONTAINERD_PID=$E2E_DIR/containerd.pid
KCM_LOG=$E2E_DIR/kube-controller-manager.log
KCM_PID=$E2E_DIR/kube-controller-manager.pid
SCHED_LOG=$E2E_DIR/kube-scheduler.log
SCHED_PID=$E2E_DIR/kube-scheduler.pid
KUBELET_LOG=$E2E_DIR/kubelet.log
KUBELET_PID=$E2E_DIR/kubelet.pid
PROXY_LOG=$E2E_DIR/kube-proxy.log
PROXY_PID=$E2E_DIR/kube-proxy.pid

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

# Bumped whenever ensure_pki makes more or different files.
PKI_VERSION=2
PKI_REGENERATED=''

client_ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"

ensure_pki() {
    [[ $(cat "$PKI/.complete" 2>/dev/null) == "$PKI_VERSION" ]] && return 0
    PKI_REGENERATED=1
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
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,IP:$NODE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
        sign_cert admin "/O=system:masters/CN=ferrule-e2e-admin" "$client_ext"
        # The components, each with the identity its default RBAC bindings name.
        sign_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client_ext"
        sign_cert kube-controller-manager "/CN=system:kube-controller-manager" "$client_ext"
        sign_cert kube-scheduler "/CN=system:kube-scheduler" "$client_ext"
        sign_cert kube-proxy "/CN=system:kube-proxy" "$client_ext"
        sign_cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "$client_ext"
        sign_cert kubelet-serving "/CN=$NODE_NAME" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,IP:127.0.0.1,DNS:$NODE_NAME"
        openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null
        openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    ) || die "openssl failed while generating $PKI"
    echo "$PKI_VERSION" >"$PKI/.complete"
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

STATE_VARS=(ETCD_CLIENT_PORT ETCD_PEER_PORT APISERVER_PORT KCM_PORT SCHED_PORT
    KUBELET_PORT KUBELET_HEALTHZ_PORT PROXY_HEALTHZ_PORT PROXY_METRICS_PORT)

load_state() {
    local v
    for v in "${STATE_VARS[@]}"; do printf -v "$v" '%s' ''; done
    # shellcheck disable=SC1090
    [[ -f $STATE ]] && source "$STATE"
    return 0
}

save_state() {
    local v
    for v in "${STATE_VARS[@]}"; do printf '%s=%s\n' "$v" "${!v:-}"; done >"$STATE.tmp"
    mv -f "$STATE.tmp" "$STATE"
}

# Every port the state holds, for free_port's exclusion list.
state_ports() {
    local v
    for v in "${STATE_VARS[@]}"; do [[ -n ${!v:-} ]] && printf '%s ' "${!v}"; done
    return 0
}

# PORT-VARIABLE: keep its port while it is free (or NAME holds it), else pick one.
ensure_port() { # VAR
    local var=$1
    if [[ -z ${!var:-} ]] || port_in_use "${!var}"; then
        # shellcheck disable=SC2046 # word splitting intended
        printf -v "$var" '%s' "$(free_port $(state_ports))"
    fi
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
    # shellcheck disable=SC2046 # word splitting intended
    ETCD_CLIENT_PORT=$(free_port $(state_ports))
    # shellcheck disable=SC2046
    ETCD_PEER_PORT=$(free_port "$ETCD_CLIENT_PORT" $(state_ports))
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
        # shellcheck disable=SC2046 # word splitting intended
        APISERVER_PORT=$(free_port $(state_ports))
    fi
    save_state
    write_client_files
    local -a node_flags
    if [[ $NODE == 1 ]]; then
        # Pods reach the apiserver at the kubernetes Service (10.96.0.1:443), which
        # kube-proxy sends to the advertised address, the bridge's, on the host.
        # Node authorizer + NodeRestriction for the kubelet's identity, and the
        # ServiceAccount admission plugin so that pods get their tokens.
        # shellcheck disable=SC2054 # commas inside a flag value
        node_flags=(
            --bind-address=0.0.0.0
            --advertise-address="$NODE_IP"
            --authorization-mode=Node,RBAC
            --enable-admission-plugins=NodeRestriction
            --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt"
            --kubelet-client-key="$PKI/apiserver-kubelet-client.key"
            --kubelet-preferred-address-types=InternalIP
            --enable-aggregator-routing=true
        )
    else
        # shellcheck disable=SC2054 # commas inside a flag value
        node_flags=(
            --bind-address=127.0.0.1
            --advertise-address=127.0.0.1
            --endpoint-reconciler-type=none
            --authorization-mode=RBAC
            --disable-admission-plugins=ServiceAccount
        )
    fi
    log "starting kube-apiserver $K8S_VERSION on https://127.0.0.1:$APISERVER_PORT"
    start_daemon "$APISERVER_PID" "$APISERVER_LOG" "$BIN_DIR/kube-apiserver" \
        "${node_flags[@]}" \
        --secure-port="$APISERVER_PORT" \
        --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$PKI/sa.pub" \
        --service-account-signing-key-file="$PKI/sa.key" \
        --client-ca-file="$PKI/ca.crt" \
        --tls-cert-file="$PKI/apiserver.crt" \
        --tls-private-key-file="$PKI/apiserver.key" \
        --cert-dir="$E2E_DIR/apiserver-certs" \
        --service-cluster-ip-range="$SERVICE_CIDR" \
        --allow-privileged=true \
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
        printf 'export FERRULE_E2E_HELM=%q\n' "$E2E_DIR/bin/helm"
        if [[ $NODE == 1 ]]; then
            printf 'export FERRULE_E2E_NODE_NAME=%q\n' "$NODE_NAME"
            printf 'export FERRULE_E2E_NODE_IP=%q\n' "$NODE_IP"
            printf 'export FERRULE_E2E_CONTAINERD=%q\n' "$CONTAINERD_SOCK"
        fi
    } >"$tmp"
    mv -f "$tmp" "$ENV_FILE"
}

# ---------------------------------------------------------------------------
# The node: containerd, CNI, kubelet, kube-proxy; and the control plane's
# controller-manager and scheduler
# ---------------------------------------------------------------------------
kubectl_admin() { "$BIN_DIR/kubectl" --kubeconfig="$KUBECONFIG_FILE" "$@"; }

ctr_k8s() { "$CTR" --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

# A kubeconfig for one component, with its client certificate.
write_component_kubeconfig() { # NAME (pki/NAME.{crt,key} -> E2E_DIR/NAME.kubeconfig)
    local name=$1 tmp
    tmp=$(mktemp "$E2E_DIR/.$name.XXXXXX")
    cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ferrule-e2e
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $name
  user:
    client-certificate: $PKI/$name.crt
    client-key: $PKI/$name.key
contexts:
- name: ferrule-e2e
  context: {cluster: ferrule-e2e, user: $name}
current-context: ferrule-e2e
EOF
    chmod 600 "$tmp"
    mv -f "$tmp" "$E2E_DIR/$name.kubeconfig"
}

# The bridge the pods hang off, with the node's address. The CNI bridge plugin
# adopts it (same name, same gateway address).
ensure_bridge() {
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge || die "could not create bridge $BRIDGE (ip link add $BRIDGE type bridge)"
    fi
    ip -4 addr show dev "$BRIDGE" | grep -q "inet $NODE_IP/" ||
        ip addr add "$NODE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
    ip link set "$BRIDGE" up
}

write_cni_config() {
    mkdir -p "$CNI_CONF_DIR" "$RUN_DIR/cni-ipam"
    local tmp
    tmp=$(mktemp "$CNI_CONF_DIR/.conflist.XXXXXX")
    cat >"$tmp" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "ferrule-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$RUN_DIR/cni-ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
    mv -f "$tmp" "$CNI_CONF_DIR/10-ferrule-e2e.conflist"
}

write_containerd_config() {
    mkdir -p "$RUN_DIR" "$CONTAINERD_ROOT"
    cat >"$CONTAINERD_CONFIG.tmp" <<EOF
# Written by test/e2e/cluster.sh: the e2e node's own containerd (not the host's).
version = 2
root = "$CONTAINERD_ROOT"
state = "$RUN_DIR/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$CONTAINERD_SOCK"

[plugins."io.containerd.internal.v1.opt"]
  path = "$CONTAINERD_ROOT/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # This machine class withholds CAP_SYS_RESOURCE even from root, so runc cannot
  # lower a process's oom_score_adj (the kubelet asks -998 for every sandbox):
  # keep each container's at least containerd's own, as kind does.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$RUNC"
        Root = "$RUN_DIR/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$CNI_CONF_DIR"
    max_conf_num = 1
EOF
    mv -f "$CONTAINERD_CONFIG.tmp" "$CONTAINERD_CONFIG"
}

containerd_healthy() {
    pid_alive "$CONTAINERD_PID" containerd && [[ -S $CONTAINERD_SOCK ]] &&
        "$CTR" --address "$CONTAINERD_SOCK" --timeout 5s version >/dev/null 2>&1
}

start_containerd() {
    need ip
    [[ -x $CONTAINERD ]] || die "containerd not found at $CONTAINERD (apt-get install containerd runc)"
    [[ -x $RUNC ]] || die "runc not found at $RUNC (apt-get install runc)"
    [[ -x $CNI_BIN_DIR/bridge && -x $CNI_BIN_DIR/host-local && -x $CNI_BIN_DIR/loopback ]] ||
        die "CNI plugins not found in $CNI_BIN_DIR (apt-get install containernetworking-plugins)"
    write_cni_config
    write_containerd_config
    log "starting containerd ($("$CONTAINERD" --version | awk '{print $3}')) on $CONTAINERD_SOCK"
    start_daemon "$CONTAINERD_PID" "$CONTAINERD_LOG" "$CONTAINERD" --config "$CONTAINERD_CONFIG"
    local deadline=$((SECONDS + 30))
    until containerd_healthy; do
        pid_alive "$CONTAINERD_PID" containerd || fail_with_logs "containerd exited during startup" "$CONTAINERD_LOG"
        ((SECONDS < deadline)) || fail_with_logs "containerd not answering on $CONTAINERD_SOCK after 30 s" "$CONTAINERD_LOG"
        sleep 0.2
    done
}

ensure_containerd() {
    containerd_healthy && return 0
    stop_process "$CONTAINERD_PID" containerd
    start_containerd
}

# https healthz of a component on loopback: "ok".
healthz_ok() { # PORT
    [[ -n ${1:-} ]] && [[ $(curl -sk --max-time 3 "https://127.0.0.1:$1/healthz" 2>/dev/null) == ok ]]
}

kcm_healthy() { pid_alive "$KCM_PID" kube-controller-manager && healthz_ok "$KCM_PORT"; }
sched_healthy() { pid_alive "$SCHED_PID" kube-scheduler && healthz_ok "$SCHED_PORT"; }
kubelet_healthy() {
    pid_alive "$KUBELET_PID" kubelet && [[ -n ${KUBELET_HEALTHZ_PORT:-} ]] &&
        [[ $(curl -s --max-time 3 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz" 2>/dev/null) == ok ]]
}
proxy_healthy() {
    pid_alive "$PROXY_PID" kube-proxy && [[ -n ${PROXY_HEALTHZ_PORT:-} ]] &&
        curl -sf --max-time 3 -o /dev/null "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz" 2>/dev/null
}
node_ready() {
    [[ $(kubectl_admin get node "$NODE_NAME" \
        -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

node_healthy() {
    containerd_healthy && kcm_healthy && sched_healthy && kubelet_healthy && proxy_healthy && node_ready
}

wait_healthy() { # NAME LOGFILE PIDFILE CHECK-FUNCTION [TIMEOUT]
    local name=$1 logfile=$2 pidfile=$3 check=$4 timeout=${5:-60}
    local deadline=$((SECONDS + timeout))
    until "$check"; do
        pid_alive "$pidfile" "$name" || fail_with_logs "$name exited during startup" "$logfile"
        ((SECONDS < deadline)) || fail_with_logs "$name not healthy after $timeout s" "$logfile"
        sleep 0.3
    done
}

start_kcm() {
    ensure_port KCM_PORT
    save_state
    write_component_kubeconfig kube-controller-manager
    local kc=$E2E_DIR/kube-controller-manager.kubeconfig
    log "starting kube-controller-manager (healthz https://127.0.0.1:$KCM_PORT)"
    start_daemon "$KCM_PID" "$KCM_LOG" "$BIN_DIR/kube-controller-manager" \
        --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
        --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
        --cert-dir="$E2E_DIR/kube-controller-manager-certs" \
        --leader-elect=false \
        --use-service-account-credentials=true \
        --service-account-private-key-file="$PKI/sa.key" \
        --root-ca-file="$PKI/ca.crt" \
        --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
        --service-cluster-ip-range="$SERVICE_CIDR" \
        --cluster-cidr="$POD_CIDR" \
        --controllers='*' \
        --profiling=false
    wait_healthy kube-controller-manager "$KCM_LOG" "$KCM_PID" kcm_healthy
}

start_scheduler() {
    ensure_port SCHED_PORT
    save_state
    write_component_kubeconfig kube-scheduler
    local kc=$E2E_DIR/kube-scheduler.kubeconfig
    log "starting kube-scheduler (healthz https://127.0.0.1:$SCHED_PORT)"
    start_daemon "$SCHED_PID" "$SCHED_LOG" "$BIN_DIR/kube-scheduler" \
        --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
        --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
        --leader-elect=false \
        --profiling=false
    wait_healthy kube-scheduler "$SCHED_LOG" "$SCHED_PID" sched_healthy
}

start_kubelet() {
    ensure_port KUBELET_PORT
    ensure_port KUBELET_HEALTHZ_PORT
    save_state
    write_component_kubeconfig kubelet
    mkdir -p "$KUBELET_DIR" "$POD_LOGS"
    cat >"$E2E_DIR/kubelet.yaml" <<EOF
# Written by test/e2e/cluster.sh.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroups v1 and no systemd as PID 1 on this machine class.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
clusterDomain: cluster.local
podCIDR: $POD_CIDR
podLogsDir: $POD_LOGS
resolvConf: /etc/resolv.conf
hairpinMode: hairpin-veth
# Images cannot be pulled again here: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "2%", imagefs.available: "2%"}
serializeImagePulls: false
maxPods: 110
# Seconds, not minutes, from a change to the node's status.
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
fileCheckFrequency: 10s
EOF
    log "starting kubelet as node $NODE_NAME ($NODE_IP:$KUBELET_PORT)"
    start_daemon "$KUBELET_PID" "$KUBELET_LOG" "$BIN_DIR/kubelet" \
        --config="$E2E_DIR/kubelet.yaml" \
        --kubeconfig="$E2E_DIR/kubelet.kubeconfig" \
        --root-dir="$KUBELET_DIR" \
        --node-ip="$NODE_IP" \
        --hostname-override="$NODE_NAME"
    wait_healthy kubelet "$KUBELET_LOG" "$KUBELET_PID" kubelet_healthy
}

start_proxy() {
    ensure_port PROXY_HEALTHZ_PORT
    ensure_port PROXY_METRICS_PORT
    save_state
    write_component_kubeconfig kube-proxy
    cat >"$E2E_DIR/kube-proxy.yaml" <<EOF
# Written by test/e2e/cluster.sh.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $E2E_DIR/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
# NodePorts on the node's bridge address only, never on the host's others.
nodePortAddresses: ["$NODE_IP/32"]
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
# Leave the host's conntrack table sizes alone.
conntrack:
  maxPerCore: 0
iptables:
  localhostNodePorts: false
  # Pod -> Service -> pod on the same bridge: the reply must come back through the
  # host to be un-NATed.
  masqueradeAll: true
  syncPeriod: 10s
  minSyncPeriod: 0s
EOF
    log "starting kube-proxy (iptables mode)"
    start_daemon "$PROXY_PID" "$PROXY_LOG" "$BIN_DIR/kube-proxy" --config="$E2E_DIR/kube-proxy.yaml"
    wait_healthy kube-proxy "$PROXY_LOG" "$PROXY_PID" proxy_healthy
}

wait_node_ready() {
    local deadline=$((SECONDS + READY_TIMEOUT))
    until node_ready; do
        pid_alive "$KUBELET_PID" kubelet || fail_with_logs "kubelet exited" "$KUBELET_LOG"
        if ((SECONDS >= deadline)); then
            kubectl_admin describe node "$NODE_NAME" >&2 || true
            fail_with_logs "node $NODE_NAME not Ready after $READY_TIMEOUT s" "$KUBELET_LOG"
        fi
        sleep 0.3
    done
    # The ServiceAccount admission plugin refuses pods until their namespace has
    # its default ServiceAccount; the controller-manager makes it.
    until kubectl_admin -n default get serviceaccount default >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail_with_logs "no default ServiceAccount after $READY_TIMEOUT s" "$KCM_LOG"
        sleep 0.3
    done
}

# The control-plane components after the apiserver, then the node. FRESH=1:
# etcd started empty, so every component starts again (the kubelet registers its
# node only when it starts).
NODE_OWNER=/run/ferrule-e2e-node.owner

# One node per machine: the bridge, the pod CIDR and kube-proxy's rules are the
# host's. A node another work dir runs is refused, by name.
claim_node() {
    local owner
    owner=$(cat "$NODE_OWNER" 2>/dev/null || true)
    if [[ -n $owner && $owner != "$E2E_DIR" ]] && pid_alive "$owner/kubelet.pid" kubelet; then
        die "the e2e node already runs for $owner (one per machine); stop it with 'FERRULE_E2E_DIR=$owner $0 down', or run FERRULE_E2E_NODE=0 $0 up for etcd + kube-apiserver only"
    fi
    echo "$E2E_DIR" >"$NODE_OWNER"
}

start_node() { # FRESH
    local fresh=$1
    claim_node
    ensure_bridge
    if [[ -n $fresh ]]; then stop_node_daemons; fi
    ensure_containerd
    kcm_healthy || { stop_process "$KCM_PID" kube-controller-manager; start_kcm; }
    sched_healthy || { stop_process "$SCHED_PID" kube-scheduler; start_scheduler; }
    kubelet_healthy || { stop_process "$KUBELET_PID" kubelet; start_kubelet; }
    proxy_healthy || { stop_process "$PROXY_PID" kube-proxy; start_proxy; }
    wait_node_ready
}

stop_node_daemons() {
    stop_process "$PROXY_PID" kube-proxy
    stop_process "$KUBELET_PID" kubelet
    stop_process "$SCHED_PID" kube-scheduler
    stop_process "$KCM_PID" kube-controller-manager
}

# Every pod container and sandbox containerd runs for the kubelet, with their
# network namespaces; then the mounts the kubelet left.
remove_pod_containers() {
    if containerd_healthy; then
        local id netns
        local -a netnses=()
        while read -r id; do
            [[ -n $id ]] || continue
            netns=$(ctr_k8s containers info "$id" 2>/dev/null |
                sed -n 's|.*"path": "\(/var/run/netns/[^"]*\)".*|\1|p; s|.*"path": "\(/run/netns/[^"]*\)".*|\1|p' | head -n 1)
            [[ -n $netns ]] && netnses+=("$netns")
            ctr_k8s tasks kill --signal SIGKILL "$id" >/dev/null 2>&1 || true
        done < <(ctr_k8s containers list --quiet 2>/dev/null)
        sleep 0.5
        while read -r id; do
            [[ -n $id ]] || continue
            ctr_k8s tasks delete --force "$id" >/dev/null 2>&1 || true
            ctr_k8s containers delete "$id" >/dev/null 2>&1 ||
                log "could not delete container $id"
        done < <(ctr_k8s containers list --quiet 2>/dev/null)
        for netns in "${netnses[@]}"; do
            umount "$netns" 2>/dev/null || true
            rm -f "$netns"
        done
    fi
    rm -rf "$RUN_DIR/cni-ipam"
}

unmount_below() { # DIR: every mount point at or below DIR, deepest first
    local dir=$1 m
    [[ -d $dir ]] || return 0
    while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
    done < <(awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
}

# The chains the kubelet adds (its canary, and KUBE-FIREWALL, which drops
# connections to 127.0.0.0/8 from other sources).
remove_kubelet_chains() {
    local ipt table
    for ipt in iptables ip6tables; do
        command -v "$ipt" >/dev/null 2>&1 || continue
        for table in filter nat mangle; do
            if "$ipt" -t "$table" -S KUBE-FIREWALL >/dev/null 2>&1; then
                while "$ipt" -t "$table" -D INPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
                while "$ipt" -t "$table" -D OUTPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
                "$ipt" -t "$table" -F KUBE-FIREWALL 2>/dev/null && "$ipt" -t "$table" -X KUBE-FIREWALL 2>/dev/null
            fi
            if "$ipt" -t "$table" -S KUBE-KUBELET-CANARY >/dev/null 2>&1; then
                "$ipt" -t "$table" -F KUBE-KUBELET-CANARY 2>/dev/null && "$ipt" -t "$table" -X KUBE-KUBELET-CANARY 2>/dev/null
            fi
        done
    done
    return 0
}

stop_node() {
    stop_node_daemons
    remove_pod_containers
    stop_process "$CONTAINERD_PID" containerd
    unmount_below "$KUBELET_DIR"
    unmount_below "$RUN_DIR"
    # The kubelet's pod directories belong to the etcd that goes away with them.
    rm -rf "$KUBELET_DIR" "$POD_LOGS" || log "could not remove all of $KUBELET_DIR (see mount)"
    if [[ -x $BIN_DIR/kube-proxy ]] && iptables -t nat -S KUBE-SERVICES >/dev/null 2>&1; then
        "$BIN_DIR/kube-proxy" --cleanup >>"$PROXY_LOG" 2>&1 || log "kube-proxy --cleanup failed (see $PROXY_LOG)"
    fi
    remove_kubelet_chains
    if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE" || true; fi
    [[ $(cat "$NODE_OWNER" 2>/dev/null) != "$E2E_DIR" ]] || rm -f "$NODE_OWNER"
}

# import FILE=NAME:TAG...: OCI archives into the node's containerd (k8s.io), each
# under the name given; skipped when containerd already has that manifest.
cmd_import() {
    (($#)) || die "usage: $0 import FILE=IMAGE..."
    need flock setsid
    take_lock
    load_state
    ensure_containerd
    local arg file name digest have
    for arg in "$@"; do
        file=${arg%%=*} name=${arg#*=}
        [[ -f $file && $name == *:* ]] || die "import: want FILE=NAME:TAG with an existing FILE, got '$arg'"
        digest=$(tar -xOf "$file" ./index.json | sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' | head -n 1)
        [[ -n $digest ]] || die "import: no manifest digest in $file's index.json"
        have=$(ctr_k8s images list "name==$name" 2>/dev/null | awk 'NR > 1 { print $3 }')
        if [[ $have == "$digest" ]]; then
            log "$name: already imported ($digest)"
            continue
        fi
        ctr_k8s images import --base-name "${name%:*}" "$file" >/dev/null ||
            die "ctr images import of $file as $name failed"
        have=$(ctr_k8s images list "name==$name" 2>/dev/null | awk 'NR > 1 { print $3 }')
        [[ $have == "$digest" ]] || die "imported $file but containerd has '$name' at '${have:-nothing}', not $digest"
        log "$name: imported ($digest)"
    done
}

# ---------------------------------------------------------------------------
# Subcommands
# ---------------------------------------------------------------------------
cluster_healthy() {
    etcd_healthy && apiserver_healthy && [[ -f $KUBECONFIG_FILE && -f $ENV_FILE ]] &&
        { [[ $NODE != 1 ]] || node_healthy; }
}

cmd_up() {
    need flock setsid curl ss base64
    [[ $NODE != 1 ]] || need ip iptables
    take_lock
    load_state
    if cluster_healthy; then
        log "already up: https://127.0.0.1:$APISERVER_PORT (KUBECONFIG=$KUBECONFIG_FILE)"
        return 0
    fi
    [[ $NODE != 1 || $(id -u) == 0 ]] || die "the node (containerd, kubelet) needs root; FERRULE_E2E_NODE=0 runs only etcd + kube-apiserver"
    local t0=$SECONDS fresh=''
    ensure_binaries
    ensure_pki
    if [[ -n $PKI_REGENERATED ]]; then
        # New certificates: nothing started with the old ones may keep running.
        stop_node_daemons
        stop_process "$APISERVER_PID" kube-apiserver
    fi
    if [[ $NODE == 1 ]]; then claim_node; ensure_bridge; fi
    if ! etcd_healthy; then
        # The apiserver cannot outlive its etcd: start both from scratch.
        stop_process "$APISERVER_PID" kube-apiserver
        stop_process "$ETCD_PID" etcd
        start_etcd
        fresh=1
    fi
    if ! apiserver_healthy; then
        stop_process "$APISERVER_PID" kube-apiserver
        start_apiserver
    fi
    write_client_files
    [[ $NODE != 1 ]] || start_node "$fresh"
    log "up in $((SECONDS - t0)) s: https://127.0.0.1:$APISERVER_PORT (KUBECONFIG=$KUBECONFIG_FILE)"
}

cmd_down() {
    take_lock
    load_state
    [[ $NODE != 1 ]] || stop_node
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

# ctr ARGS...: ctr against the node's containerd, namespace k8s.io.
cmd_ctr() {
    load_state
    containerd_healthy || die "the node's containerd is not running ($CONTAINERD_SOCK); run '$0 up' or '$0 import'"
    exec "$CTR" --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"
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
    if [[ $NODE == 1 ]]; then
        local spec name pidfile check
        for spec in "containerd:$CONTAINERD_PID:containerd_healthy" \
            "kube-controller-manager:$KCM_PID:kcm_healthy" "kube-scheduler:$SCHED_PID:sched_healthy" \
            "kubelet:$KUBELET_PID:kubelet_healthy" "kube-proxy:$PROXY_PID:proxy_healthy"; do
            IFS=: read -r name pidfile check <<<"$spec"
            if pid_alive "$pidfile" "$name"; then
                if "$check"; then printf '%-24s running, healthy (pid %s)\n' "$name:" "$(<"$pidfile")"
                else printf '%-24s running, NOT healthy (pid %s)\n' "$name:" "$(<"$pidfile")"; rc=1; fi
            else
                printf '%-24s stopped\n' "$name:"; rc=1
            fi
        done
        if node_ready; then printf '%-24s Ready (%s, pods %s on %s)\n' "node $NODE_NAME:" "$NODE_IP" "$POD_CIDR" "$BRIDGE"
        else printf '%-24s NOT Ready\n' "node $NODE_NAME:"; rc=1; fi
        echo "containerd socket:       $CONTAINERD_SOCK"
    fi
    echo "kubeconfig:     $KUBECONFIG_FILE"
    echo "logs:           $E2E_DIR/*.log"
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
    load_state
    [[ $NODE != 1 ]] || stop_node
    stop_process "$APISERVER_PID" kube-apiserver
    stop_process "$ETCD_PID" etcd
    find "$E2E_DIR" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
    log "removed everything under $E2E_DIR (binary cache $CACHE_DIR kept)"
}

usage() {
    cat <<EOF
usage: $0 COMMAND

  up                 build binaries on first use, start etcd + kube-apiserver, the
                     controller-manager, scheduler, containerd, kubelet and kube-proxy,
                     write $E2E_DIR/{kubeconfig,env}; no-op when already up
  down               stop everything, pod containers and their network namespaces too
  status             show process state (exit 0 only when all are healthy)
  env                print 'export KUBECONFIG=...' lines (eval "\$($0 env)")
  restart-apiserver  stop and start kube-apiserver only (same port, etcd kept)
  stop-apiserver     stop kube-apiserver only
  start-apiserver    start kube-apiserver again (etcd must be running)
  build              only build/cache the binaries
  reset              down + delete $E2E_DIR (keeps the binary cache)
  import FILE=IMAGE  import OCI archives into the node's containerd (namespace k8s.io),
                     starting containerd if needed (make image does this)
  ctr ARGS...        ctr against the node's containerd, namespace k8s.io

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
    import) shift; cmd_import "$@" ;;
    ctr) shift; cmd_ctr "$@" ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
esac
