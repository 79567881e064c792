#!/usr/bin/env bash
# Ferrule in-NGINX balancer tests: unit tests of the pure Lua modules (run
# inside NGINX) and behaviour tests with curl/openssl against a private nginx
# running the configuration `ferrule render` writes from lua/test/manifests/,
# plus lua/test/test-only.conf (unit-test locations, identity upstreams).
# Needs: nginx with the lua module, curl, openssl, python3, and the ferrule
# binary (target/debug/ferrule, or FERRULE=path).
# Usage: lua/test/run.sh   (KEEP=1 keeps the temp prefix; FAST=1: with the C
# fast path)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LUA_DIR=$(dirname "$HERE")
# shellcheck source=../../test/lib.sh
. "$LUA_DIR/../test/lib.sh"

require "$NGINX" curl openssl python3
new_prefix lua

# ---------------------------------------------------------------- setup
PORT_VARS="PROXY_PORT TLS_PORT BACKEND_PORT SLOW_PORT DEAD_PORT LEAK_PORT"
read -r $PORT_VARS < <(free_ports 6)

# FAST=1: with the C fast path (nginx-module/), which then balances the plain
# backends of every section below: the same checks hold through it. The
# renderer uses it when NGINX loads the module; per-request metrics stay off
# (a check below expects the API without them).
FAST=${FAST:-0}
fast_flag=(--no-fast-path)
[ "$FAST" = 1 ] && fast_flag=()
render_prefix "$HERE/manifests" "${fast_flag[@]}" --enable-metrics=false
# The unit tests, their runner and the API's case files, where a worker reads them.
REPO=$(for_workers lua/test lua/ferrule balancer/cases)
render_conf "$HERE/test-only.conf" -e "s#LUA_DIR#$REPO/lua#g" > "$WORK/conf/test-only.conf"
if [ "$FAST" = 1 ] && ! grep -q '^ *ferrule_fast;' "$WORK/conf/nginx.conf"; then
    echo "FATAL: FAST=1, but the renderer left the C fast path out (does nginx load" \
         "/usr/lib/nginx/modules/ngx_http_ferrule_module.so? make deps builds it)" >&2
    exit 2
fi
# The balancer under test is this tree's lua/ferrule: the copy the binary carries
# is the tree it was built from, which may predate an edit.
rm -rf "$WORK/lua/ferrule" && cp -r "$LUA_DIR/ferrule" "$WORK/lua/"

TOKEN=$(openssl rand -hex 24)
echo "  $TOKEN  " > "$WORK/conf/balancer.token"   # surrounding blanks: must be trimmed

common_certs
chmod 644 "$WORK/conf/default.key"   # the unit tests read it in a worker (nobody)
# the static fallback, also where the rendered servers name their certificate
cat "$WORK/certs/fallback.crt" "$WORK/certs/fallback.key" > "$WORK/conf/certs/default.pem"
test_and_start

WORKERS_AT_START=$(workers)

# ---------------------------------------------------------------- 1. unit tests
section "unit tests (pure modules, run inside nginx)"
UNIT_STATUS=$(curl -s -o "$WORK/out/unit" -w '%{http_code}' --unix-socket "$WORK/run/test.sock" http://t/t/unit)
grep -E '^(not ok|#)' "$WORK/out/unit" | sed 's/^/    /'
check "unit tests pass ($(grep -c '^ok' "$WORK/out/unit") ok)" [ "$UNIT_STATUS" = 200 ]

# ---------------------------------------------------------------- 2. API access
section "configuration API access control"
check "no token -> 401" [ "$(status --unix-socket "$SOCK" http://x/configuration/version)" = 401 ]
check "wrong token -> 401" [ "$(status --unix-socket "$SOCK" -H 'Authorization: Bearer nope' http://x/configuration/version)" = 401 ]
check "token without Bearer -> 401" [ "$(status --unix-socket "$SOCK" -H "Authorization: $TOKEN" http://x/configuration/version)" = 401 ]
check "right token (trimmed from file) -> 200" [ "$(api GET /configuration/version)" = 200 ]
check "handler reached over TCP -> 403 even with the token" \
    [ "$(status -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$LEAK_PORT/configuration/version")" = 403 ]
check "unknown API path -> 404" [ "$(api GET /configuration/nope)" = 404 ]
check "wrong method -> 405" [ "$(api DELETE /configuration/backends)" = 405 ]
check "metrics off (no metrics in init) -> 404" [ "$(api GET /configuration/metrics)" = 404 ]
check "metrics: wrong method -> 405" [ "$(api POST /configuration/metrics)" = 405 ]

# ---------------------------------------------------------------- 3. backends
section "POST /configuration/backends"
EPS4="$(ep 127.0.0.2 $B),$(ep 127.0.0.3 $B),$(ep 127.0.0.4 $B),$(ep 127.0.0.5 $B)"
BODY=$(cat <<EOF
{"version": 1, "backends": [
  {"name": "default_echo_80", "endpoints": [$EPS4,$(ep ::1 $B)], "load_balance": "round_robin",
   "upstream_hash_by": null, "affinity": null, "canary": null},
  {"name": "default_rr_80", "endpoints": [$EPS4]},
  {"name": "default_empty_80", "endpoints": []},
  {"name": "default_hash_80", "endpoints": [$(ep 127.0.0.2 $B),$(ep 127.0.0.3 $B),$(ep 127.0.0.4 $B)], "upstream_hash_by": "\$arg_user"},
  {"name": "default_sticky_80", "endpoints": [$EPS4], "affinity": {"mode": "cookie", "cookie_name": "route", "max_age": 3600, "path": "/"}},
  {"name": "default_main_80", "endpoints": [$(ep 127.0.0.2 $B)],
   "canary": {"backend": "default_main-canary_80", "weight": 20, "weight_total": 100, "header": "X-Canary", "header_value": null, "cookie": "canary"}},
  {"name": "default_main-canary_80", "endpoints": [$(ep 127.0.0.3 $B)]},
  {"name": "default_ewma_80", "endpoints": [$(ep 127.0.0.2 $B),$(ep 127.0.0.5 $SLOW_PORT)], "load_balance": "ewma"},
  {"name": "default_retry_80", "endpoints": [$(ep 127.0.0.2 $DEAD_PORT),$(ep 127.0.0.3 $B),$(ep 127.0.0.4 $B)]}
 ], "removed": []}
EOF
)
check "POST backends -> 201" [ "$(api POST /configuration/backends "$BODY")" = 201 ]
cat "$WORK/out/api" | sed 's/^/    /'
check "invalid JSON -> 400" [ "$(api POST /configuration/backends '{"version": 1, "backends": [')" = 400 ]
check "400 says why (invalid JSON)" grep -q 'invalid JSON' "$WORK/out/api"
check "invalid field -> 400" [ "$(api POST /configuration/backends '{"version":2,"backends":[{"name":"x","endpoints":[{"address":"nohost","port":1}]}]}')" = 400 ]
check "400 says why (address)" grep -q 'IPv4 or IPv6' "$WORK/out/api"
check "endpoint \"1:2\" (not an IPv6 address) -> 400" \
    [ "$(api POST /configuration/backends "{\"version\":2,\"backends\":[{\"name\":\"x\",\"endpoints\":[$(ep 127.0.0.2 $B),$(ep 1:2 80)]}]}")" = 400 ]
check "  ... naming the field" grep -qF 'endpoints[1]: address must be an IPv4 or IPv6 literal, got 1:2' "$WORK/out/api"
check "rejected POST changed nothing" [ "$(api GET /configuration/backends/x)" = 404 ]
check "GET /configuration/backends/default_rr_80" [ "$(api GET /configuration/backends/default_rr_80)" = 200 ]
check "  ... returns the stored backend" grep -q "\"127.0.0.5\"" "$WORK/out/api"
check "GET /configuration/backends lists all 9" \
    python3 -c "import json,sys; sys.exit(len(json.load(open(sys.argv[1]))['backends']) != 9)" \
    <(curl -s --unix-socket "$SOCK" -H "Authorization: Bearer $TOKEN" http://x/configuration/backends)
check "GET /configuration/backends?names=1 lists the 9 names only" \
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(sorted(d) != ['generation','names','version'] or len(d['names']) != 9 or 'default_rr_80' not in d['names'])" \
    <(curl -s --unix-socket "$SOCK" -H "Authorization: Bearer $TOKEN" "http://x/configuration/backends?names=1")
api GET /configuration/version >/dev/null
check "GET /configuration/version reports version 1" grep -q '"version":1' "$WORK/out/api"

section "the API is unreachable through the proxy"
# What the store holds (not the workers' reports, which change every second).
stored_now() {
    version_now | python3 -c 'import json,sys; d=json.load(sys.stdin); b=d["backends"]; c=d["certificates"]; print(b["version"], b["generation"], c["version"], c["generation"])'
}
GEN_BEFORE=$(stored_now)
probe_api_via_proxy
check "every Host/path on the proxy port reaches normal routing (an echo backend)" [ $LEAK = 0 ]
check "a POST through the proxy changed nothing" \
    [ "$GEN_BEFORE" = "$(stored_now)" ]

# ---------------------------------------------------------------- 4. round robin
section "round robin"
hits "/rr/?[1-400]"
echo "    $(awk '{print $1}' "$WORK/out/hits" | sort | uniq -c | tr '\n' ' ')"
ok=1
for a in 127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5; do between "$(count "$a:$B")" 90 110 || ok=0; done
check "400 requests spread evenly over 4 endpoints (100±10 each)" [ $ok = 1 ]
hits "/?[1-100]"
check "IPv6 endpoint [::1] receives traffic" [ "$(count "::1:$B")" -ge 10 ]
check "upstream keepalive: connections to the endpoints are reused" \
    [ "$(awk '$NF > 1' "$WORK/out/hits" | wc -l)" -ge 50 ]

section "the C fast path takes the plain backends only (FAST=$FAST)"
fast_of() { # NAME: the peers the C module holds for it, as JSON (null: none)
    api GET "/configuration/backends/$1" > /dev/null
    python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["fast_path"]))' "$WORK/out/api"
}
if [ "$FAST" = 1 ]; then
    check "plain round robin: its endpoints" \
        [ "$(fast_of default_rr_80)" = "[\"127.0.0.2:$B\", \"127.0.0.3:$B\", \"127.0.0.4:$B\", \"127.0.0.5:$B\"]" ]
else
    check "without the module: none" [ "$(fast_of default_rr_80)" = null ]
fi
for b in main sticky hash ewma; do
    check "  ... not $b (canary, affinity, hash, EWMA stay on Lua)" [ "$(fast_of "default_${b}_80")" = null ]
done

section "endpoint change without reload"
W1=$(workers)
api POST /configuration/backends "{\"version\":2,\"backends\":[{\"name\":\"default_rr_80\",\"endpoints\":[$(ep 127.0.0.4 $B),$(ep 127.0.0.5 $B)]}]}" >/dev/null
hits "/rr/?[1-100]"   # immediately, no sleep
check "the very next requests only reach the 2 new endpoints" \
    [ "$(count "127.0.0.4:$B")" -ge 45 -a "$(count "127.0.0.5:$B")" -ge 45 -a "$(total)" = 100 ]
check "worker pids unchanged (no reload)" [ "$W1" = "$(workers)" ]
for _ in 1 2 3 4 5 6; do curl -s --unix-socket "$WORK/run/test.sock" http://t/t/worker; done | sort -u > "$WORK/out/wstate"
check "workers applied the change incrementally (1 full sync each, at start)" \
    bash -c "! grep -v 'full_syncs=1$' '$WORK/out/wstate'"

sleep 0.2
api GET /configuration/version >/dev/null
check "GET /configuration/version: every worker reports the current generation" \
    python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['backends']; w=d['workers']; sys.exit(not (len(w)==2 and all(v==d['generation'] for v in w.values())))" "$WORK/out/api"

section "503 for unknown backends and backends without endpoints"
check "unknown backend -> 503" [ "$(status "$PROXY/unknown/")" = 503 ]
check "backend with no endpoints -> 503" [ "$(status "$PROXY/empty/")" = 503 ]
curl -s "$PROXY/empty/" > "$WORK/out/body"
check "  ... NGINX's own 503 page (answered by the 503 server, not a 502)" \
    grep -q '503 Service Temporarily Unavailable' "$WORK/out/body"
check "with the rewrite phase: no endpoints -> 503" [ "$(status "$PROXY/full/empty/")" = 503 ]
# A request with a body is answered before the body is read: no "100 Continue".
head -c 200000 /dev/zero > "$WORK/out/upload"
expect100() { curl -sv -o /dev/null -H 'Expect: 100-continue' --data-binary @"$WORK/out/upload" "$@" 2>&1; }
expect100 "$PROXY/empty/" > "$WORK/out/expect"
check "an upload to a backend without endpoints -> 503 before the body is read" \
    bash -c "grep -q '< HTTP/1.1 503' '$WORK/out/expect' && ! grep -q '< HTTP/1.1 100' '$WORK/out/expect'"
api POST /configuration/backends '{"version":3,"backends":[],"removed":["default_rr_80"]}' >/dev/null
check "removed backend -> 503 at once" [ "$(status "$PROXY/rr/")" = 503 ]

section "IPv6 endpoints in other text forms"
api POST /configuration/backends "{\"version\":3,\"backends\":[{\"name\":\"default_rr_80\",\"endpoints\":[$(ep 0:0:0:0:0:0:0:1 $B),$(ep ::ffff:127.0.0.3 $B)]}]}" >/dev/null
hits "/rr/?[1-20]"
check "uncompressed and IPv4-mapped addresses are accepted and reached" \
    [ "$(count "::1:$B")" = 10 -a "$(count "127.0.0.3:$B")" = 10 ]

section "retries: a dead endpoint is skipped"
hits "/retry/?[1-60]" -w '%{http_code}\n'
check "60/60 requests answered 200 although one endpoint refuses connections" \
    [ "$(grep -c '^200$' "$WORK/out/hits")" = 60 ]
check "  ... and the live endpoints share them" \
    [ "$(count "127.0.0.3:$B")" -ge 20 -a "$(count "127.0.0.4:$B")" -ge 20 ]

# ---------------------------------------------------------------- 5. hash
section "consistent hash by \$arg_user"
hits "/hash/?user=u[1-300]"
awk '{print $2, $1}' "$WORK/out/hits" | sort > "$WORK/out/hash1"
hits "/hash/?user=u[1-300]"
awk '{print $2, $1}' "$WORK/out/hits" | sort > "$WORK/out/hash2"
check "each user sticks to one endpoint" cmp -s "$WORK/out/hash1" "$WORK/out/hash2"
check "users spread over all 3 endpoints" [ "$(awk '{print $2}' "$WORK/out/hash1" | sort -u | wc -l)" = 3 ]
api POST /configuration/backends "{\"version\":4,\"backends\":[{\"name\":\"default_hash_80\",\"upstream_hash_by\":\"\$arg_user\",\"endpoints\":[$(ep 127.0.0.2 $B),$(ep 127.0.0.3 $B),$(ep 127.0.0.4 $B),$(ep 127.0.0.5 $B)]}]}" >/dev/null
hits "/hash/?user=u[1-300]"
awk '{print $2, $1}' "$WORK/out/hits" | sort > "$WORK/out/hash3"
read -r MOVED MOVED_ELSEWHERE < <(join "$WORK/out/hash1" "$WORK/out/hash3" |
    awk -v n="127.0.0.5:$B" '$2 != $3 { m++; if ($3 != n) e++ } END { print m+0, e+0 }')
echo "    adding a 4th peer moved $MOVED/300 users (ideal ~75)"
check "adding a peer moves few keys (<= 40%)" [ "$MOVED" -le 120 -a "$MOVED" -ge 20 ]
check "moved keys all went to the new peer" [ "$MOVED_ELSEWHERE" = 0 ]

# ---------------------------------------------------------------- 6. affinity
section "cookie affinity"
curl -s -D "$WORK/out/h1" -c "$WORK/out/jar" "$PROXY/sticky/" > "$WORK/out/hits"
FIRST=$(awk '{print $1}' "$WORK/out/hits")
check "first response sets route cookie (opaque id, Path, Max-Age, HttpOnly)" \
    grep -qiE '^Set-Cookie: route=[0-9a-f]{32}; Path=/; Max-Age=3600; HttpOnly' "$WORK/out/h1"
hits "/sticky/?[1-30]" -b "$WORK/out/jar" -D "$WORK/out/h2"
check "30 requests with the cookie stick to $FIRST" [ "$(count "$FIRST")" = 30 ]
check "  ... and get no new cookie" bash -c "! grep -qi '^Set-Cookie' '$WORK/out/h2'"
hits "/sticky/?[1-40]"
check "requests without a cookie are spread (round robin)" [ "$(distinct)" = 4 ]
REMAINING=""
for a in 127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5; do
    [ "$a:$B" = "$FIRST" ] || REMAINING="$REMAINING${REMAINING:+,}$(ep $a $B)"
done
api POST /configuration/backends "{\"version\":5,\"backends\":[{\"name\":\"default_sticky_80\",\"endpoints\":[$REMAINING],\"affinity\":{\"mode\":\"cookie\",\"cookie_name\":\"route\",\"max_age\":3600,\"path\":\"/\"}}]}" >/dev/null
curl -s -D "$WORK/out/h3" -b "$WORK/out/jar" -c "$WORK/out/jar" "$PROXY/sticky/" > "$WORK/out/hits"
SECOND=$(awk '{print $1}' "$WORK/out/hits")
check "endpoint removed -> re-picked ($FIRST -> $SECOND)" [ -n "$SECOND" -a "$SECOND" != "$FIRST" ]
check "  ... with a new cookie" grep -qi '^Set-Cookie: route=' "$WORK/out/h3"
hits "/sticky/?[1-20]" -b "$WORK/out/jar"
check "  ... and sticks to the new endpoint" [ "$(count "$SECOND")" = 20 ]

# ---------------------------------------------------------------- 7. canary
section "canary"
hits "/canary/?[1-2000]"
CANARY=$(count "127.0.0.3:$B")
echo "    canary got $CANARY/2000 (weight 20%)"
check "weight 20 -> 20% ± 5% over 2000 requests" between "$CANARY" 300 500
check "every request answered" [ "$(total)" = 2000 ]
hits "/canary/?[1-50]" -H "X-Canary: always"
check "header always -> canary" [ "$(count "127.0.0.3:$B")" = 50 ]
hits "/canary/?[1-50]" -H "X-Canary: never"
check "header never -> primary" [ "$(count "127.0.0.2:$B")" = 50 ]
hits "/canary/?[1-50]" -b "canary=always"
check "cookie always -> canary" [ "$(count "127.0.0.3:$B")" = 50 ]
hits "/canary/?[1-50]" -b "canary=never"
check "cookie never -> primary" [ "$(count "127.0.0.2:$B")" = 50 ]
# a request with a body is routed in the rewrite phase (before its body is read)
hits "/canary/?[1-20]" -H "X-Canary: always" --data-binary body
check "POST with header always -> canary (rewrite phase)" [ "$(count "127.0.0.3:$B")" = 20 ]
api POST /configuration/backends "{\"version\":6,\"backends\":[{\"name\":\"default_main_80\",\"endpoints\":[$(ep 127.0.0.2 $B)],\"canary\":{\"backend\":\"default_main-canary_80\",\"weight\":0,\"header\":\"X-Canary\",\"header_value\":\"yes-please\"}}]}" >/dev/null
hits "/canary/?[1-30]" -H "X-Canary: yes-please"
check "header_value exact match -> canary" [ "$(count "127.0.0.3:$B")" = 30 ]
hits "/canary/?[1-30]" -H "X-Canary: always"
check "header_value set: 'always' is just another value -> primary" [ "$(count "127.0.0.2:$B")" = 30 ]
hits "/canary/?[1-30]" -H "X-Canary: Yes-Please"
check "header_value match is case-sensitive -> primary" [ "$(count "127.0.0.2:$B")" = 30 ]
api POST /configuration/backends '{"version":7,"removed":["default_main-canary_80"]}' >/dev/null
hits "/canary/?[1-20]" -H "X-Canary: yes-please"
check "canary backend gone -> primary serves" [ "$(count "127.0.0.2:$B")" = 20 ]

# ---------------------------------------------------------------- 8. ewma
section "ewma"
hits "/ewma/?[1-200]"
QUICK=$(count "127.0.0.2:$B")
echo "    fast endpoint got $QUICK/200 (the other answers in 50 ms)"
check "EWMA sends most traffic to the fast endpoint (>= 80%)" [ "$QUICK" -ge 160 ]

# ---------------------------------------------------------------- 9. certificates
section "certificates (ssl_certificate_by_lua)"
check "before any POST: static fallback" grep -q 'CN=static-fallback' <(subject a.example.com)
check "POST certificates -> 201" [ "$(api POST /configuration/certificates "$(jcerts 1 a.example.com=a '*.w.example.com=wild')")" = 201 ]
check "exact host served without reload" grep -q 'CN=a.example.com' <(subject a.example.com)
check "SNI is case-insensitive" grep -q 'CN=a.example.com' <(subject A.Example.COM)
redirect() { curl -s -o /dev/null -w '%{http_code} %{redirect_url}' -H "Host: $1" "$PROXY$2"; }
for loc in /redirect/ /full/redirect/; do
    check "ssl-redirect once the host has a certificate ($loc)" \
        [ "$(redirect a.example.com "${loc}x?y=1")" = "308 https://a.example.com${loc}x?y=1" ]
done
expect100 -H "Host: a.example.com" "$PROXY/redirect/up" > "$WORK/out/expect"
check "  ... an upload too, before its body is sent in clear text" \
    bash -c "grep -q '< HTTP/1.1 308' '$WORK/out/expect' && ! grep -q '< HTTP/1.1 100' '$WORK/out/expect'"
check "  ... nor over HTTPS" grep -qE "^(127.0.0|::1)" \
    <(curl -sk --resolve "a.example.com:$TLS_PORT:127.0.0.1" "https://a.example.com:$TLS_PORT/redirect/")
check "wildcard *.w.example.com serves x.w.example.com" grep -q 'CN=\*.w.example.com' <(subject x.w.example.com)
check "wildcard covers one label only (y.x.w.example.com -> fallback)" grep -q 'CN=static-fallback' <(subject y.x.w.example.com)
check "unknown host without a default -> static fallback" grep -q 'CN=static-fallback' <(subject other.example.org)
SERIAL_BEFORE=$(subject a.example.com)
check "rotation POST -> 201" [ "$(api POST /configuration/certificates "$(jcerts 2 a.example.com=a2 default=dflt)")" = 201 ]
check "rotated certificate served at once (serial 4242 = 0x1092)" grep -q 'serial=1092' <(subject a.example.com)
check "posted default serves unknown hosts" grep -q 'CN=ferrule-default' <(subject other.example.org)
check "posted default serves clients without SNI" grep -q 'CN=ferrule-default' <(subject "")
check "removal POST -> 201" [ "$(api POST /configuration/certificates "$(jcerts 3 rm=a.example.com)")" = 201 ]
check "removed host falls back to the default" grep -q 'CN=ferrule-default' <(subject a.example.com)
check "  ... and is no longer redirected to HTTPS" [ "$(redirect a.example.com /redirect/)" = "200 " ]
expect100 -H "Host: a.example.com" "$PROXY/redirect/up" > "$WORK/out/expect"
check "  ... and an upload is proxied (through the rewrite phase a body turns on)" \
    bash -c "grep -q '< HTTP/1.1 100' '$WORK/out/expect' && grep -q '< HTTP/1.1 200' '$WORK/out/expect'"
# A certificate that comes while a request waits for a peer that times out (the
# location's proxy-read-timeout is 1s, the slow peer sleeps 2): the
# retry on the other peer serves it, not a redirect.
api POST /configuration/backends "{\"version\":8,\"backends\":[{\"name\":\"default_slowfirst_80\",\"endpoints\":[$(ep 127.0.0.5 $SLOW_PORT),$(ep 127.0.0.2 $B)],\"upstream_hash_by\":\"\$arg_k\"}]}" >/dev/null
K=""
for k in $(seq 1 40); do
    if curl -s -H "Host: a.example.com" "$PROXY/slowfirst/?k=$k&sleep=0" | grep -q slow; then K=$k; break; fi
done
curl -s -o "$WORK/out/slowfirst" -w '%{http_code}' -H "Host: a.example.com" "$PROXY/slowfirst/?k=$K&sleep=2" > "$WORK/out/slowfirst.code" &
SLOW_PID=$!
sleep 0.2
api POST /configuration/certificates "$(jcerts 4 a.example.com=a)" > /dev/null
wait "$SLOW_PID"
check "a retry after a certificate came is served, not redirected (k=$K)" \
    bash -c "[ -n '$K' ] && [ \"\$(cat '$WORK/out/slowfirst.code')\" = 200 ] && grep -q '^127.0.0.2:$B ' '$WORK/out/slowfirst'"
check "  ... and the next request is redirected" [ "$(redirect a.example.com "/slowfirst/?k=$K")" = "308 https://a.example.com/slowfirst/?k=$K" ]
api POST /configuration/certificates "$(jcerts 5 rm=a.example.com)" > /dev/null
check "broken PEM -> 400" [ "$(api POST /configuration/certificates '{"version":4,"certificates":[{"host":"b.example.com","cert":"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n","key":"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}]}')" = 400 ]
python3 - "$WORK/certs" > "$WORK/out/mismatch.json" <<'EOF'
import json, sys
d = sys.argv[1]
print(json.dumps({"version": 5, "certificates": [{"host": "m.example.com",
    "cert": open(f"{d}/a.crt").read(), "key": open(f"{d}/wild.key").read()}]}))
EOF
check "certificate with a key that does not match -> 400" \
    [ "$(api POST /configuration/certificates "$(cat "$WORK/out/mismatch.json")")" = 400 ]
check "  ... and says so" grep -q 'does not match' "$WORK/out/api"
check "GET certificates -> 200" [ "$(api GET /configuration/certificates)" = 200 ]
check "  ... lists hosts" grep -q '\*.w.example.com' "$WORK/out/api"
check "  ... never keys" bash -c "! grep -qi 'PRIVATE\|BEGIN' '$WORK/out/api'"
check "HTTPS traffic is proxied too" grep -qE "^(127.0.0|::1)" <(curl -sk --resolve "x.w.example.com:$TLS_PORT:127.0.0.1" "https://x.w.example.com:$TLS_PORT/")

# ---------------------------------------------------------------- 10. scale
section "10,000 backends: bulk load, then one change"
big_backends "$WORK/out/big.json"
T0=$(date +%s%N)
check "POST 10k backends -> 201" [ "$(curl -s -o "$WORK/out/api" -w '%{http_code}' --unix-socket "$SOCK" \
    -H "Authorization: Bearer $TOKEN" --data-binary @"$WORK/out/big.json" http://x/configuration/backends)" = 201 ]
echo "    bulk POST of $(( $(stat -c %s "$WORK/out/big.json") / 1024 )) KiB took $(( ($(date +%s%N) - T0) / 1000000 )) ms"
hits "/?[1-4]"   # both workers pick the bulk change up
T0=$(date +%s%N)
api POST /configuration/backends "{\"version\":101,\"backends\":[{\"name\":\"default_echo_80\",\"endpoints\":[$(ep 127.0.0.4 $B)]}]}" >/dev/null
hits "/?[1-20]"
echo "    one change among 10k + 20 requests took $(( ($(date +%s%N) - T0) / 1000000 )) ms"
check "the single change is live at once" [ "$(count "127.0.0.4:$B")" = 20 ]
for _ in 1 2 3 4 5 6; do curl -s --unix-socket "$WORK/run/test.sock" http://t/t/worker; done | sort -u > "$WORK/out/wstate"
check "still no full re-sync in any worker" bash -c "! grep -v 'full_syncs=1$' '$WORK/out/wstate'"
T0=$(date +%s%N)
curl -s -o "$WORK/out/all" --unix-socket "$SOCK" -H "Authorization: Bearer $TOKEN" http://x/configuration/backends
T1=$(date +%s%N)
curl -s -o "$WORK/out/names" --unix-socket "$SOCK" -H "Authorization: Bearer $TOKEN" "http://x/configuration/backends?names=1"
T2=$(date +%s%N)
echo "    GET of all 10k backends took $(( (T1 - T0) / 1000000 )) ms, of their names $(( (T2 - T1) / 1000000 )) ms"
check "names of 10k backends" python3 -c "import json,sys; sys.exit(len(json.load(open(sys.argv[1]))['names']) < 10000)" "$WORK/out/names"

# ---------------------------------------------------------------- wrap up
section "health"
check "same master and worker pids as at start (no reload, no crash)" [ "$WORKERS_AT_START" = "$(workers)" ]
check "no Lua runtime errors / alerts in error.log" \
    bash -c "! grep -E 'runtime error|writing a global|\[alert\]|\[crit\]|\[emerg\]' '$WORK/logs/error.log'"

section "reload keeps the dynamic configuration (shared dicts survive HUP)"
kill -HUP "$MASTER"
wait_new_workers "$WORKERS_AT_START"
check "new workers after HUP" [ "$(workers)" != "$WORKERS_AT_START" ]
hits "/?[1-50]"
check "backends still routed after reload without re-POSTing" [ "$(grep -c "^127.0.0\|^::1" "$WORK/out/hits")" = 50 ]
check "certificates still served after reload" grep -q 'CN=\*.w.example.com' <(subject x.w.example.com)
check "hash mapping unchanged across workers and reload" \
    bash -c "curl -s '$PROXY/hash/?user=u[1-300]' | awk '{print \$2, \$1}' | sort | cmp -s - '$WORK/out/hash3'"
check "no Lua runtime errors / alerts after reload" \
    bash -c "! grep -E 'runtime error|writing a global|\[alert\]|\[crit\]|\[emerg\]' '$WORK/logs/error.log'"

if [ "$FAST" = 1 ]; then
    section "a reload that makes the fast path's zone anew (the shared dicts keep theirs)"
    api POST /configuration/certificates "$(jcerts 9 a.example.com=a)" > /dev/null
    W=$(workers)
    # (the renderer quotes the size)
    sed -i 's/ferrule_fast_zone "128m";/ferrule_fast_zone 64m;/' "$WORK/conf/nginx.conf"
    kill -HUP "$MASTER"
    wait_new_workers "$W"
    # at once, before or after the workers mirror the store into the new zone
    api POST /configuration/backends "{\"version\":20,\"backends\":[{\"name\":\"default_echo_80\",\"endpoints\":[$(ep 127.0.0.2 $B)]}]}" > /dev/null
    check "plain HTTP to a host with a certificate is still redirected" \
        [ "$(redirect a.example.com /redirect/x)" = "308 https://a.example.com/redirect/x" ]
    sleep 0.3
    check "the store is mirrored into the new zone: a backend not posted since" [ "$(fast_of default_rr_80)" != null ]
    check "  ... and the hosts with a certificate (still redirected)" \
        [ "$(redirect a.example.com /redirect/y)" = "308 https://a.example.com/redirect/y" ]
    api POST /configuration/certificates "$(jcerts 10 rm=a.example.com)" > /dev/null
    check "  ... a removed certificate leaves it (proxied by the fast path)" \
        [ "$(redirect a.example.com /redirect/)" = "200 " ]
    # A POST that an old worker finishes after a reload made a new zone: it writes
    # the old zone; the new workers notice (the zone it went to is recorded) and
    # mirror the store again.
    api POST /configuration/backends "{\"version\":21,\"backends\":[{\"name\":\"default_rr_80\",\"endpoints\":[$(ep 127.0.0.2 $B)]}]}" > /dev/null
    python3 - "$SOCK" "$TOKEN" "$MASTER" "$WORK/conf/nginx.conf" "$B" > "$WORK/out/inflight" <<'PY'
import json, os, signal, socket, sys, time
sock, token, master, conf, port = sys.argv[1:]
body = json.dumps({"version": 22, "backends": [{"name": "default_rr_80",
    "endpoints": [{"address": "127.0.0.3", "port": int(port)}]}],
    "removed": ["default_retry_80"]}).encode()
s = socket.socket(socket.AF_UNIX)
s.connect(sock)
s.sendall(b"POST /configuration/backends HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
          + token.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
          % len(body) + body[:10])
time.sleep(0.3)
text = open(conf).read()
open(conf, "w").write(text.replace("ferrule_fast_zone 64m;", "ferrule_fast_zone 32m;"))
os.kill(int(master), signal.SIGHUP)
time.sleep(1.0)  # the new workers run, and have mirrored the store
s.sendall(body[10:])
print(s.recv(4096).split(b"\r\n")[0].decode())
PY
    check "  (an old worker answered the in-flight POST)" grep -q '^HTTP/1.1 201' "$WORK/out/inflight"
    sleep 0.3
    check "a POST an old worker wrote during a reload reaches the new zone" \
        [ "$(fast_of default_rr_80)" = "[\"127.0.0.3:$B\"]" ]
    hits "/rr/?[1-20]"
    check "  ... and its traffic" [ "$(count "127.0.0.3:$B")" = 20 ]
    check "  ... and a backend it removed is gone from it (503)" [ "$(status "$PROXY/retry/")" = 503 ]
fi

report
