#!/usr/bin/env bash
# Endpoint change -> traffic latency with 10k backends in the store.
#
#   test/bench/endpoint_latency.sh          # builds ferrule --release first
#   SKIP_BUILD=1 N=100 SCALE=10000 test/bench/endpoint_latency.sh
#
# The latency is measured by a client (latency.py): from the moment a change is made
# until the first response from the new endpoint (tight keepalive request loop).
# Scenarios, all with SCALE backends in the balancer store:
#   api          POST the change to the balancer API directly: the data plane alone
#                (store write + worker pick-up), SCALE backends posted to the store;
#   manifests    rewrite the Service manifest: the whole controller with its defaults
#                (standalone source polling every 200 ms, coalescing window 100 ms,
#                model build, diff, POST), same store;
#   manifests-c0 the same with --coalesce-ms 0 (what the coalescing window costs);
#   scale        SCALE Services + EndpointSlices in the manifests as well (the standalone
#                source re-reads every file on any change, the model builder indexes
#                them), SCALE backends in the store. SCALE_SHAPE=paths (one Ingress
#                path per Service, 1,000 per host) or hosts (one Ingress and host per
#                Service) make them all model backends too, but NGINX then needs more
#                than Ferrule's 10 s start verification to load SCALE locations or
#                servers on a 2-core machine, and the first apply fails.
# Goal: p99 <= 250 ms.
source "$(dirname "$0")/lib.sh"

N=${N:-100}
N_SCALE=${N_SCALE:-40}
SCALE=${SCALE:-10000}
SCENARIOS=${SCENARIOS:-api manifests manifests-c0 scale}
OUT=${OUT:-}

build_ferrule
WORK=$(mktemp -d /tmp/ferrule-lat.XXXXXX)
F=$WORK/ferrule
cleanup() {
    stop_ferrule "$F"
    stop_nginx "$WORK/backend"
    [ "${KEEP:-0}" = 1 ] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT

IPS=$(seq -s, -f '127.0.1.%g' 1 8)
BPORT=$(free_port)
# shellcheck disable=SC2086
write_backend "$WORK/backend" "$BPORT" ${IPS//,/ }
start_nginx "$WORK/backend"

base_manifests() { # DIR
    mkdir -p "$1"
    cat > "$1/class.yaml" <<YAML
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: ferrule
  annotations: { ingressclass.kubernetes.io/is-default-class: "true" }
spec: { controller: ferrule.dev/ingress-controller }
YAML
    for svc in lat direct; do
        python3 -c "import sys; sys.path.insert(0, '$ROOT/test/bench'); from latency import service_yaml; print(service_yaml('bench', '$svc', $BPORT, '127.0.1.1'))" > "$1/svc-$svc.yaml"
        cat > "$1/ing-$svc.yaml" <<YAML
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: { name: $svc, namespace: bench, creationTimestamp: "2026-01-01T00:00:00Z" }
spec:
  rules:
  - host: $svc.test
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: { service: { name: $svc, port: { number: 80 } } }
YAML
    done
}

PORTS=()
start() { # MANIFESTS [flags...]
    local man=$1; shift
    rm -rf "$F/nginx"; mkdir -p "$F"
    PORTS=("$(free_port)" "$(free_port)" "$(free_port)")
    local t0=$SECONDS
    start_ferrule "$F" "$man" "${PORTS[0]}" "${PORTS[1]}" "${PORTS[2]}" "$@"
    local limit=$((SECONDS + ${READY_TIMEOUT:-600}))
    until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${PORTS[2]}/readyz")" = 200 ]; do
        if grep -q 'applying the configuration failed' "$F/ferrule.log"; then
            echo "ferrule failed to apply its first configuration (it does not retry):" >&2
            grep -m1 'applying the configuration failed' "$F/ferrule.log" >&2
            return 1
        fi
        [ "$SECONDS" -lt "$limit" ] || { echo "ferrule not ready" >&2; return 1; }
        sleep 0.2
    done
    log "ferrule ready after $((SECONDS - t0)) s"
    wait_http "http://127.0.0.1:${PORTS[0]}/" lat.test "127.0.1.1:$BPORT"
}

metric() { # NAME -> value (sum over label sets)
    curl -s "http://127.0.0.1:${PORTS[2]}/metrics" | awk -v m="$1" '$1 ~ "^"m"({|$)" {s+=$2} END{print s+0}'
}

RESULTS=()
report() { # NAME JSON EXTRA
    local line
    line=$(python3 - "$1" "$2" "$3" <<'PY'
import json, sys
name, r, extra = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
ms = lambda x: f"{x * 1000:.0f} ms"
ok = "goal met" if r["p99"] <= 0.25 else "GOAL MISSED"
print(f"  {name:<13} n={r['n']:<4} p50={ms(r['p50']):>7} p90={ms(r['p90']):>7} "
      f"p99={ms(r['p99']):>7} max={ms(r['max']):>7} errors={r['errors']}  ({ok}){extra}")
PY
)
    log "$line"
    RESULTS+=("$line")
}

controller_breakdown() {
    local dc ds sc ss
    dc=$(metric ferrule_dynamic_update_latency_seconds_count)
    ds=$(metric ferrule_dynamic_update_latency_seconds_sum)
    sc=$(metric ferrule_sync_duration_seconds_count)
    ss=$(metric ferrule_sync_duration_seconds_sum)
    awk -v dc="$dc" -v ds="$ds" -v sc="$sc" -v ss="$ss" 'BEGIN{
        printf "; controller: detected->posted mean %.0f ms (incl. coalescing), model build+diff mean %.1f ms",
            (dc>0 ? ds/dc*1000 : 0), (sc>0 ? ss/sc*1000 : 0)}'
}

lat() { # MODE N [args]
    local mode=$1 n=$2; shift 2
    python3 "$ROOT/test/bench/latency.py" --mode "$mode" -n "$n" --port "${PORTS[0]}" \
        --backend-port "$BPORT" --ips "$IPS" "$@"
}

for s in $SCENARIOS; do
    case $s in
    api|manifests|manifests-c0)
        man=$WORK/m-small; rm -rf "$man"; base_manifests "$man"
        flags=()
        [ "$s" = manifests-c0 ] && flags=(--coalesce-ms 0)
        start "$man" "${flags[@]}"
        python3 "$ROOT/test/bench/fill_store.py" "$F/nginx/run/balancer.sock" \
            "$F/nginx/conf/balancer.token" "$SCALE" >&2
        if [ "$s" = api ]; then
            r=$(lat api "$N" --host direct.test --socket "$F/nginx/run/balancer.sock" \
                --token-file "$F/nginx/conf/balancer.token" --backend bench_direct_80)
            report "$s" "$r" ""
        else
            r=$(lat manifests "$N" --host lat.test --file "$man/svc-lat.yaml")
            report "$s" "$r" "$(controller_breakdown)"
        fi
        stop_ferrule "$F"
        ;;
    scale)
        man=$WORK/m-scale; rm -rf "$man"; base_manifests "$man"
        shape=${SCALE_SHAPE:-services}
        python3 "$ROOT/test/bench/gen_manifests.py" "$man" "$SCALE" "$shape"
        log "generated $SCALE Services ($shape; $(du -sh "$man" | cut -f1))"
        start "$man"
        if [ "$shape" = services ]; then
            python3 "$ROOT/test/bench/fill_store.py" "$F/nginx/run/balancer.sock" \
                "$F/nginx/conf/balancer.token" "$SCALE" >&2
        fi
        r=$(lat manifests "$N_SCALE" --host lat.test --file "$man/svc-lat.yaml")
        report "$s-$shape" "$r" "$(controller_breakdown)"
        stop_ferrule "$F"
        ;;
    *) echo "unknown scenario $s" >&2; exit 2 ;;
    esac
done

summary="endpoint change -> traffic latency ($(date -u +%FT%TZ); $SCALE backends in the store; goal p99 <= 250 ms)"
for l in "${RESULTS[@]}"; do summary+=$'\n'"$l"; done
echo "$summary"
[ -n "$OUT" ] && echo "$summary" >> "$OUT"
exit 0
