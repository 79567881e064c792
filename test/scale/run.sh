#!/usr/bin/env bash
# `make bench-scale`: Ferrule against a real kube-apiserver holding 10k Ingresses,
# 10k Services and 10k EndpointSlices x 10 endpoints (100k endpoints).
#
# Measures: time from controller start to Ready (/readyz 200), controller RSS (peak
# = VmHWM, and steady state), NGINX master+workers RSS/PSS, and EndpointSlice
# update -> traffic latency through NGINX (p50/p99 over $UPDATES updates).
# Goals: Ready <= 60 s, RSS <= 300 MB, EndpointSlice -> traffic p99 <= 1 s.
#
#   test/scale/run.sh                        # build, cluster up, load, measure, cluster down
#   KEEP_CLUSTER=1 test/scale/run.sh         # keep the loaded cluster for a re-run
#   SKIP_BUILD=1 SKIP_LOAD=1 test/scale/run.sh   # re-measure on a kept cluster
#   COUNT=1000 UPDATES=20 test/scale/run.sh  # smaller
#   PUBLISH_STATUS=0 test/scale/run.sh       # no --publish-status-address (no status pass)
#
# It runs its own cluster (FERRULE_E2E_DIR=target/scale-e2e: own etcd, apiserver and
# ports) and its own network namespace (ferrule-scale, 10.214.0.0/24), so it does not
# disturb the e2e tests' cluster (target/e2e) nor their backends (ferrule-e2e,
# 10.213.0.x:8080). Needs root (network namespace).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
COUNT=${COUNT:-10000}
ENDPOINTS=${ENDPOINTS:-10}
UPDATES=${UPDATES:-50}
CONCURRENCY=${CONCURRENCY:-48}
READY_TIMEOUT=${READY_TIMEOUT:-600}
SETTLE=${SETTLE:-15}
STATUS_WAIT=${STATUS_WAIT:-1200}
NETNS=${NETNS:-ferrule-scale}
ADDRESSES=$((2 * ENDPOINTS))
export FERRULE_E2E_DIR=${FERRULE_E2E_DIR:-$ROOT/target/scale-e2e}
# etcd + kube-apiserver only: the e2e node (one per machine) stays the e2e tests'.
export FERRULE_E2E_NODE=${FERRULE_E2E_NODE:-0}
FERRULE=${FERRULE:-$ROOT/target/release/ferrule}
SCALE=$ROOT/target/release/examples/scale
KUBECONFIG_FILE=$FERRULE_E2E_DIR/kubeconfig
SHAPE=(--count "$COUNT" --endpoints "$ENDPOINTS" --addresses "$ADDRESSES" --first-address 10.214.0.2)

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# kB of a /proc/PID/status field (0 when the process is gone).
status_kb() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
pss_kb() { awk '$1 == "Pss:" { print $2 }' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
mb() { awk -v k="${1:-0}" 'BEGIN { printf "%.0f", k / 1024 }'; }

WORK=$(mktemp -d /tmp/ferrule-scale.XXXXXX)
FPID='' EPID='' SAMPLER=''
cleanup() {
    set +e
    [[ -n $SAMPLER ]] && kill "$SAMPLER" 2>/dev/null
    if [[ -n $FPID ]] && kill -0 "$FPID" 2>/dev/null; then
        kill -TERM "$FPID"
        for _ in $(seq 300); do kill -0 "$FPID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$FPID" 2>/dev/null
    fi
    # A Ferrule killed hard leaves its NGINX behind.
    if [[ -s $WORK/nginx/run/nginx.pid ]]; then
        kill -QUIT "$(cat "$WORK/nginx/run/nginx.pid")" 2>/dev/null
    fi
    [[ -n $EPID ]] && kill "$EPID" 2>/dev/null
    if [[ ${KEEP_CLUSTER:-0} != 1 ]]; then
        "$ROOT/test/e2e/cluster.sh" down >&2
    else
        log "cluster kept (FERRULE_E2E_DIR=$FERRULE_E2E_DIR); stop it with: FERRULE_E2E_DIR=$FERRULE_E2E_DIR test/e2e/cluster.sh down"
    fi
    log "logs and NGINX prefix kept in $WORK"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

[[ $(id -u) == 0 ]] || { echo "test/scale/run.sh needs root (network namespace)" >&2; exit 1; }

# --- build ------------------------------------------------------------------
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
    log "cargo build --release -p ferrule --bin ferrule --example scale"
    (cd "$ROOT" && cargo build --release -p ferrule --bin ferrule --example scale >&2)
fi

# The target dir is shared: keep private copies of the binaries under test, so that
# another build cannot replace them during the run.
cp -p "$FERRULE" "$WORK/ferrule" && FERRULE=$WORK/ferrule
cp -p "$SCALE" "$WORK/scale" && SCALE=$WORK/scale
TREE="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD -- controller model rootfs lua 2>/dev/null || echo "+uncommitted changes")"
log "ferrule binary built $(date -r "$FERRULE" +%FT%T) from tree $TREE"

# --- cluster + backends -----------------------------------------------------
log "cluster up ($FERRULE_E2E_DIR)"
"$ROOT/test/e2e/cluster.sh" up >&2

# Network namespace: host side 10.214.0.1, backends 10.214.0.2 .. 2+ADDRESSES-1.
if ! ip netns exec "$NETNS" true 2>/dev/null ||
    ! ip netns exec "$NETNS" ip -4 addr show dev fsc-n | grep -q "10.214.0.$((1 + ADDRESSES))/"; then
    log "creating network namespace $NETNS"
    ip netns del "$NETNS" 2>/dev/null || true
    ip link del fsc-h 2>/dev/null || true
    ip netns add "$NETNS"
    ip link add fsc-h type veth peer name fsc-n
    ip link set fsc-n netns "$NETNS"
    ip addr add 10.214.0.1/24 dev fsc-h
    ip link set fsc-h up
    ip netns exec "$NETNS" ip link set lo up
    ip netns exec "$NETNS" ip link set fsc-n up
    for ((k = 2; k <= 1 + ADDRESSES; k++)); do
        ip netns exec "$NETNS" ip addr add "10.214.0.$k/24" dev fsc-n
    done
fi
"$SCALE" echo --netns "$NETNS" "${SHAPE[@]}" >"$WORK/echo.log" 2>&1 &
EPID=$!
for _ in $(seq 100); do grep -q listening "$WORK/echo.log" && break; sleep 0.1; done
grep -q listening "$WORK/echo.log" || { cat "$WORK/echo.log" >&2; exit 1; }
log "$(cat "$WORK/echo.log")"

# --- load -------------------------------------------------------------------
LOAD_S='skipped (SKIP_LOAD=1)'
if [[ ${SKIP_LOAD:-0} != 1 ]]; then
    log "loading $COUNT Services, EndpointSlices ($ENDPOINTS endpoints) and Ingresses, $CONCURRENCY in flight"
    "$SCALE" load --kubeconfig "$KUBECONFIG_FILE" --concurrency "$CONCURRENCY" "${SHAPE[@]}" | tee "$WORK/load.out"
    LOAD_S=$(sed -n 's/.*load_seconds=\([0-9.]*\).*/\1/p' "$WORK/load.out")
fi
KUBECTL=$FERRULE_E2E_DIR/bin/kubectl
count_of() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" get "$1" -n scale --no-headers 2>/dev/null | wc -l; }
log "in the API server: $(count_of ingresses) Ingresses, $(count_of services) Services, $(count_of endpointslices) EndpointSlices"

# --- ferrule ----------------------------------------------------------------
HTTP=$(free_port) HTTPS=$(free_port) STATUS=$(free_port)
PUBLISH=()
[[ ${PUBLISH_STATUS:-1} == 1 ]] && PUBLISH=(--publish-status-address 10.214.0.1)
log "starting ferrule (prefix $WORK/nginx, http $HTTP, status $STATUS)"
T0=$(now)
RUST_LOG=${RUST_LOG:-info,ferrule=debug} NO_COLOR=1 "$FERRULE" run \
    --kubeconfig "$KUBECONFIG_FILE" \
    --nginx-prefix "$WORK/nginx" \
    --listen-address 127.0.0.1 --http-port "$HTTP" --https-port "$HTTPS" \
    --status-address 127.0.0.1 --status-port "$STATUS" \
    --worker-processes 2 \
    "${PUBLISH[@]}" \
    --lease-namespace default \
    >"$WORK/ferrule.out" 2>"$WORK/ferrule.log" &
FPID=$!

nginx_pids() {
    local m
    m=$(cat "$WORK/nginx/run/nginx.pid" 2>/dev/null) || return 0
    [[ -n $m ]] || return 0
    echo "$m"
    ps -o pid= --ppid "$m" 2>/dev/null || true
}
nginx_kb() { # FIELD (VmRSS) or pss: sum over master + workers
    local s=0 p v
    for p in $(nginx_pids); do
        if [[ $1 == pss ]]; then v=$(pss_kb "$p"); else v=$(status_kb "$p" "$1"); fi
        s=$((s + ${v:-0}))
    done
    echo "$s"
}

# Samples every 200 ms: elapsed, ferrule RSS, NGINX RSS sum (for the peaks).
(
    while kill -0 "$FPID" 2>/dev/null; do
        printf '%s %s %s\n' "$(since "$T0")" "$(status_kb "$FPID" VmRSS)" "$(nginx_kb VmRSS)"
        sleep 0.2
    done
) >"$WORK/rss.samples" &
SAMPLER=$!

# Ferrule gives up on an NGINX that takes longer than its verify timeout (10 s) to
# start serving, and then waits for the next change. With NUDGE=1 (default) the
# script makes that change (an annotation Ferrule does not read, on one Ingress)
# once NGINX's workers run, so that the rest can still be measured; the summary
# says so.
READY='' STUCK='' NUDGED=''
while :; do
    if ! kill -0 "$FPID" 2>/dev/null; then
        tail -n 40 "$WORK/ferrule.log" >&2
        echo "ferrule exited before Ready" >&2
        exit 1
    fi
    if [[ $(curl -s -o /dev/null -w '%{http_code}' -m 1 "http://127.0.0.1:$STATUS/readyz") == 200 ]]; then
        READY=$(since "$T0")
        break
    fi
    if [[ -z $STUCK ]] && grep -q "did not start serving" "$WORK/ferrule.log"; then
        STUCK=$(since "$T0")
        log "ferrule gave up waiting for NGINX to start at $STUCK s: $(grep -m1 "did not start serving" "$WORK/ferrule.log" | sed 's/.*error=//')"
    fi
    if [[ -n $STUCK && -z $NUDGED && ${NUDGE:-1} == 1 && $(nginx_pids | wc -l) -gt 1 ]]; then
        NUDGED=$(since "$T0")
        log "NGINX workers run at $NUDGED s; nudging ferrule with an annotation change on scale/ing-00000"
        "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" annotate --overwrite -n scale ingress ing-00000 \
            "bench.ferrule.dev/nudge=$(date +%s)" >&2
    fi
    if awk -v t="$(since "$T0")" -v m="$READY_TIMEOUT" 'BEGIN { exit !(t > m) }'; then
        log "not Ready after $READY_TIMEOUT s"
        break
    fi
    sleep 0.1
done
# CPU seconds (robust to a busy machine): the controller itself, and its waited-for
# children (the `nginx -t` runs).
cpu_s() { # PID: "self S s + nginx -t T s"
    awk -v hz="$(getconf CLK_TCK)" '{ printf "self %.1f s + nginx -t %.1f s", ($14 + $15) / hz, ($16 + $17) / hz }' "/proc/$1/stat" 2>/dev/null
}
READY_CPU=$(cpu_s "$FPID")
READY_RSS=$(status_kb "$FPID" VmRSS)
READY_HWM=$(status_kb "$FPID" VmHWM)
log "Ready after ${READY:-NEVER} s (RSS $(mb "$READY_RSS") MB, peak so far $(mb "$READY_HWM") MB)"
[[ -n $READY ]] || exit 1

# A request through NGINX to one of the Ingresses, as a sanity check.
curl -s -m 5 -H "Host: svc-00001.scale.test" "http://127.0.0.1:$HTTP/" | sed 's/^/[check] svc-00001.scale.test answered by /' >&2

# The lease holder writes status.loadBalancer into every Ingress (one PATCH each,
# one after the other) and a Normal event per Ingress (50 per 5 s round); each
# status write comes back as a watch event and a model rebuild. Measure how long
# the status pass takes, then let things settle before the steady-state figures.
# (On a kept cluster the statuses may be written already: then there is no pass.)
with_status() {
    "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" get ingresses -n scale \
        -o jsonpath='{range .items[*]}{.status.loadBalancer.ingress[0].ip}{"\n"}{end}' 2>/dev/null |
        grep -c '^10\.214\.0\.1$' || true
}
STATUS_DONE='' STATUS_BEFORE=''
if [[ ${PUBLISH_STATUS:-1} == 1 ]]; then
    STATUS_BEFORE=$(with_status)
    log "waiting (up to $STATUS_WAIT s) for the status of all $COUNT Ingresses ($STATUS_BEFORE written at Ready)"
    for ((k = 0; k < STATUS_WAIT / 10; k++)); do
        [[ $(with_status) -ge $COUNT ]] && { STATUS_DONE=$(since "$T0"); break; }
        sleep 10
    done
    log "Ingress status of all $COUNT Ingresses written: ${STATUS_DONE:-not within $STATUS_WAIT} s after start"
fi
log "settling for $SETTLE s"
sleep "$SETTLE"
STEADY_RSS=$(status_kb "$FPID" VmRSS)
NGINX_RSS=$(nginx_kb VmRSS)
NGINX_PSS=$(nginx_kb pss)
NGINX_N=$(nginx_pids | wc -l)
log "steady state: ferrule RSS $(mb "$STEADY_RSS") MB; NGINX ($NGINX_N processes) RSS sum $(mb "$NGINX_RSS") MB, PSS sum $(mb "$NGINX_PSS") MB"

# --- EndpointSlice -> traffic -------------------------------------------------
log "EndpointSlice -> traffic latency: $UPDATES updates"
"$SCALE" latency --kubeconfig "$KUBECONFIG_FILE" --http-port "$HTTP" --updates "$UPDATES" "${SHAPE[@]}" | tee "$WORK/latency.out"
lat() { sed -n "s/.*$1=\([0-9.a-zA-Z]*\).*/\1/p" "$WORK/latency.out"; }

AFTER_RSS=$(status_kb "$FPID" VmRSS)
AFTER_CPU=$(cpu_s "$FPID")
PEAK_RSS=$(status_kb "$FPID" VmHWM)
NGINX_PEAK=$(awk 'BEGIN { m = 0 } $3 > m { m = $3 } END { print m }' "$WORK/rss.samples")
metric() { curl -s "http://127.0.0.1:$STATUS/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
RELOADS=$(curl -s "http://127.0.0.1:$STATUS/metrics" | awk '$1 ~ /^ferrule_reloads_total/ { split($1, a, "\""); printf "%s%s=%s", sep, a[2], $2; sep = ", " }')
SYNC_SUM=$(metric ferrule_sync_duration_seconds_sum)
SYNC_N=$(metric ferrule_sync_duration_seconds_count)
CONF_BYTES=$(du -sb "$WORK/nginx/conf" 2>/dev/null | cut -f1)
APISERVER_RSS=$(status_kb "$(cat "$FERRULE_E2E_DIR/kube-apiserver.pid")" VmRSS)
ETCD_RSS=$(status_kb "$(cat "$FERRULE_E2E_DIR/etcd.pid")" VmRSS)

# Phases, from the controller's log (seconds since start).
T0_EPOCH=$T0
at() { # PATTERN: seconds from start to the first log line matching PATTERN
    local ts
    ts=$(grep -m1 -- "$1" "$WORK/ferrule.log" | cut -d' ' -f1) || true
    [[ -n $ts ]] || { echo -; return; }
    awk -v a="$T0_EPOCH" -v b="$(date -d "$ts" +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
}
LISTED=$(at "every watch has listed")
APPLIED_LINE=$(grep -m1 "configuration applied" "$WORK/ferrule.log" || true)
APPLIED=$(at "configuration applied")
TEST_TIME=$(sed -n 's/.*test_time=\([^ ]*\).*/\1/p' <<<"$APPLIED_LINE")

ok() { awk -v v="$1" -v g="$2" 'BEGIN { print (v != "" && v + 0 <= g + 0) ? "met" : "MISSED" }'; }
cat <<EOF

## Scale benchmark $(date -u +%Y-%m-%dT%H:%MZ)
machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r), $(nginx -v 2>&1)
ferrule: binary built $(date -r "$FERRULE" +%FT%T), tree $TREE
objects: $COUNT Ingresses, $COUNT Services, $COUNT EndpointSlices x $ENDPOINTS endpoints = $((COUNT * ENDPOINTS)) endpoints
load into the API server ($CONCURRENCY in flight): ${LOAD_S}$([[ $LOAD_S == skipped* ]] || echo " s")

| figure | value | goal |
| --- | --- | --- |
| start -> Ready | ${READY} s$([[ -n $NUDGED ]] && echo " (only after a nudge at ${NUDGED} s: ferrule gave up on NGINX's start at ${STUCK} s)") | <= 60 s: $([[ -n $NUDGED ]] && echo "MISSED (never Ready by itself)" || ok "$READY" 60) |
| phases: every watch listed / first configuration applied (nginx -t ${TEST_TIME:--}) | ${LISTED} s / ${APPLIED} s | |
| controller CPU time at Ready; at the end | ${READY_CPU}; ${AFTER_CPU} | |
| machine load average at the end (other work on the machine) | $(cut -d' ' -f1-3 /proc/loadavg) | |
| controller RSS at Ready | $(mb "$READY_RSS") MB | |
| controller RSS steady (status pass + ${SETTLE} s) | $(mb "$STEADY_RSS") MB | <= 300 MB: $(ok "$(mb "$STEADY_RSS")" 300) |
| controller RSS after the latency loop | $(mb "$AFTER_RSS") MB | |
| controller peak RSS (VmHWM) | $(mb "$PEAK_RSS") MB | <= 300 MB: $(ok "$(mb "$PEAK_RSS")" 300) |
| NGINX master + $((NGINX_N - 1)) workers, RSS sum / PSS sum (steady) | $(mb "$NGINX_RSS") MB / $(mb "$NGINX_PSS") MB | (information) |
| NGINX RSS sum, peak sampled | $(mb "$NGINX_PEAK") MB | (information) |
| EndpointSlice -> traffic p50 / p90 / p99 / max (n=$(lat latency_n), misses $(lat latency_misses)) | $(lat latency_p50_ms) / $(lat latency_p90_ms) / $(lat latency_p99_ms) / $(lat latency_max_ms) ms | p99 <= 1000 ms: $(ok "$(lat latency_p99_ms)" 1000) |
| apply round trip (API server), p50 | $(lat apply_p50_ms) ms | |
| reload passes by result | ${RELOADS:-none} | |
| every Ingress status written (publish-status-address; $STATUS_BEFORE written at Ready) | ${STATUS_DONE:-not measured} s after start | |
| model syncs: count, mean build+diff | ${SYNC_N}, $(awk -v s="${SYNC_SUM:-0}" -v n="${SYNC_N:-0}" 'BEGIN { if (n > 0) printf "%.0f ms", 1000 * s / n; else print "-" }') | |
| NGINX conf size | $(mb "$((${CONF_BYTES:-0} / 1024))") MB | |
| kube-apiserver / etcd RSS | $(mb "$APISERVER_RSS") MB / $(mb "$ETCD_RSS") MB | |
EOF
