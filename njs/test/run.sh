#!/usr/bin/env bash
# Ferrule njs balancer tests: unit tests of the pure modules (run inside
# nginx) and behaviour tests with curl/openssl against a private nginx running
# the configuration `ferrule render --balancer njs` writes from
# njs/test/manifests/, plus njs/test/test-only.conf (unit-test location,
# identity upstreams). Needs: nginx + libnginx-mod-http-js (njs 0.7.9), curl,
# openssl, python3 (stdlib), procps, and the ferrule binary
# (target/debug/ferrule, or FERRULE=path).
# Usage: njs/test/run.sh   (KEEP=1 keeps the temp prefix; NGINX=/path/to/nginx)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NJS_DIR=$(dirname "$HERE")
JS_MODULE=/usr/lib/nginx/modules/ngx_http_js_module.so
# shellcheck source=../../test/lib.sh
. "$NJS_DIR/../test/lib.sh"

require "$NGINX" curl openssl python3 ps
[ -f "$JS_MODULE" ] || { echo "FATAL: $JS_MODULE not found (apt-get install libnginx-mod-http-js)" >&2; exit 2; }
new_prefix njs

# ---------------------------------------------------------------- setup
PORT_VARS="PROXY_PORT TLS_PORT BACKEND_PORT DEAD_PORT LEAK_PORT"
read -r $PORT_VARS < <(free_ports 5)

render_prefix "$HERE/manifests" --balancer njs
# The unit tests, the modules they import and the API's case files, where a worker
# reads them.
REPO=$(for_workers njs/test njs/ferrule njs/ferrule.js njs/stream.js balancer/cases)
render_conf "$HERE/test-only.conf" -e "s#NJS_DIR#$REPO/njs#g" > "$WORK/conf/test-only.conf"
# The balancer under test is this tree's njs/: the copy the binary carries is
# the tree it was built from, which may predate an edit.
rm -rf "$WORK/njs/ferrule" && cp -r "$NJS_DIR/ferrule" "$NJS_DIR/ferrule.js" "$NJS_DIR/stream.js" "$WORK/njs/"

TOKEN=$(openssl rand -hex 24)
# JSON for js_preload_object; surrounding blanks in the token must be trimmed
printf '{"token": "  %s  "}\n' "$TOKEN" > "$WORK/conf/balancer.token.json"
chmod 600 "$WORK/conf/balancer.token.json"

common_certs
# other key formats: RSA with a PKCS#1 key, EC with a SEC1 key
openssl genrsa -traditional -out "$WORK/certs/rsa.key" 2048 2>/dev/null
openssl req -x509 -new -key "$WORK/certs/rsa.key" -days 2 -subj "/CN=rsa.example.com" \
    -out "$WORK/certs/rsa.crt" 2>/dev/null
openssl ecparam -name secp384r1 -genkey -noout -out "$WORK/certs/sec1.key" 2>/dev/null
openssl req -x509 -new -key "$WORK/certs/sec1.key" -days 2 -subj "/CN=sec1.example.com" \
    -out "$WORK/certs/sec1.crt" 2>/dev/null
for k in rsa:'RSA PRIVATE KEY' sec1:'EC PRIVATE KEY'; do
    grep -q "BEGIN ${k#*:}" "$WORK/certs/${k%%:*}.key" ||
        { echo "FATAL: openssl did not write a ${k#*:}" >&2; exit 1; }
done

# fail closed: without the token file the configuration does not load
sed "s#$WORK/conf/balancer.token.json#$WORK/conf/missing.token.json#" "$WORK/conf/nginx.conf" \
    > "$WORK/conf/notoken.conf"
NOTOKEN_T=0
"$NGINX" -p "$WORK" -c conf/notoken.conf -e "$WORK/logs/t.log" -t >/dev/null 2>&1 || NOTOKEN_T=1

test_and_start

WORKERS_AT_START=$(workers)

# ---------------------------------------------------------------- 1. unit tests
section "unit tests (pure modules, run inside nginx)"
UNIT_STATUS=$(curl -s -o "$WORK/out/unit" -w '%{http_code}' --unix-socket "$WORK/run/test.sock" http://t/t/unit)
grep -E '^(not ok|#)' "$WORK/out/unit" | sed 's/^/    /'
check "unit tests pass ($(grep -c '^ok' "$WORK/out/unit") ok)" [ "$UNIT_STATUS" = 200 ]

# ---------------------------------------------------------------- 2. API access
section "configuration API access control"
check "nginx -t refuses a configuration whose token file is missing (fail closed)" [ $NOTOKEN_T = 1 ]
check "no token -> 401" [ "$(status --unix-socket "$SOCK" http://x/configuration/version)" = 401 ]
check "wrong token -> 401" [ "$(status --unix-socket "$SOCK" -H 'Authorization: Bearer nope' http://x/configuration/version)" = 401 ]
check "token without Bearer -> 401" [ "$(status --unix-socket "$SOCK" -H "Authorization: $TOKEN" http://x/configuration/version)" = 401 ]
check "token with one character changed -> 401" \
    [ "$(status --unix-socket "$SOCK" -H "Authorization: Bearer ${TOKEN%?}x" http://x/configuration/version)" = 401 ]
check "POST without token -> 401 and nothing written" \
    [ "$(status --unix-socket "$SOCK" --data-binary '{"version":1,"backends":[{"name":"evil"}]}' http://x/configuration/backends)" = 401 -a ! -e "$WORK/run/ferrule-state/meta.json" ]
check "right token (trimmed) -> 200" [ "$(api GET /configuration/version)" = 200 ]
check "  ... version null before any POST" grep -q '"version":null' "$WORK/out/api"
check "handler reached over TCP -> 403 even with the token" \
    [ "$(status -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$LEAK_PORT/configuration/version")" = 403 ]
check "unknown API path -> 404" [ "$(api GET /configuration/nope)" = 404 ]
check "wrong method -> 405" [ "$(api DELETE /configuration/backends)" = 405 ]

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
  {"name": "default_dead_80", "endpoints": [$(ep 127.0.0.2 $DEAD_PORT),$(ep 127.0.0.3 $B)]},
  {"name": "default_ewma_80", "endpoints": [$(ep 127.0.0.2 $B)], "load_balance": "ewma"}
 ], "removed": []}
EOF
)
check "POST backends -> 201" [ "$(api POST /configuration/backends "$BODY")" = 201 ]
sed 's/^/    /' "$WORK/out/api"
check "state files are private (dir 0700, files 0600)" \
    [ "$(stat -c %a "$WORK/run/ferrule-state/b")" = 700 -a "$(stat -c %a "$WORK/run/ferrule-state/meta.json")" = 600 ]
check "invalid JSON -> 400" [ "$(api POST /configuration/backends '{"version": 1, "backends": [')" = 400 ]
check "400 says why (invalid JSON)" grep -q 'invalid JSON' "$WORK/out/api"
check "invalid field -> 400" [ "$(api POST /configuration/backends '{"version":2,"backends":[{"name":"y"},{"name":"x","endpoints":[{"address":"nohost","port":1}]}]}')" = 400 ]
check "400 names the field" grep -q 'backends\[1\] \\"x\\": endpoints\[0\]: address must be an IPv4 or IPv6 literal, got nohost' "$WORK/out/api"
check "rejected POST changed nothing" [ "$(api GET /configuration/backends/y)" = 404 ]
check "GET /configuration/backends/default_rr_80" [ "$(api GET /configuration/backends/default_rr_80)" = 200 ]
check "  ... returns the stored backend" grep -q '"127.0.0.5"' "$WORK/out/api"
check "GET /configuration/backends lists all 9" \
    python3 -c "import json,sys; sys.exit(len(json.load(open(sys.argv[1]))['backends']) != 9)" \
    <(curl -s --unix-socket "$SOCK" -H "Authorization: Bearer $TOKEN" http://x/configuration/backends)
check "GET /configuration/backends?names=1 lists the 9 names only" \
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(sorted(d) != ['generation','names','version'] or len(d['names']) != 9 or 'default_rr_80' not in d['names'])" \
    <(curl -s --unix-socket "$SOCK" -H "Authorization: Bearer $TOKEN" "http://x/configuration/backends?names=1")
api GET /configuration/version >/dev/null
check "GET /configuration/version reports version 1" grep -q '"version":1' "$WORK/out/api"

section "the API is unreachable through the proxy"
GEN_BEFORE=$(version_now)
probe_api_via_proxy
out=$(curl -sk --resolve "x.w.example.com:$TLS_PORT:127.0.0.1" -H "Authorization: Bearer $TOKEN" "https://x.w.example.com:$TLS_PORT/configuration/version")
case "$out" in 127.0.0.*|::1*) ;; *) LEAK=1; echo "    via TLS -> $out" ;; esac
check "every Host/path on the proxy ports reaches normal routing (an echo backend)" [ $LEAK = 0 ]
check "a POST through the proxy changed nothing" \
    [ "$GEN_BEFORE" = "$(version_now)" ]

# ---------------------------------------------------------------- 4. round robin
section "round robin"
hits "/rr/?[1-400]"
echo "    one keep-alive connection: $(spread)"
ok=1
for a in 127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5; do between "$(count "$a:$B")" 90 110 || ok=0; done
check "400 requests on one connection spread evenly over 4 endpoints (100±10 each)" [ $ok = 1 ]
python3 - "$PROXY_PORT" 400 /rr/ > "$WORK/out/hits" <<'EOF'
import http.client, sys
port, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for _ in range(n):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", path, headers={"Connection": "close"})
    sys.stdout.write(c.getresponse().read().decode())
    c.close()
EOF
echo "    400 one-shot connections: $(spread)"
ok=1
for a in 127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5; do between "$(count "$a:$B")" 80 120 || ok=0; done
check "400 requests on 400 new connections spread evenly (100±20 each)" [ $ok = 1 -a "$(total)" = 400 ]
hits "/?[1-100]"
check "IPv6 endpoint [::1] receives traffic" [ "$(count "::1:$B")" -ge 10 ]
check "Host header passed through (not the peer address)" [ "$(awk '$4 == "h=127.0.0.1"' "$WORK/out/hits" | wc -l)" = 100 ]
check "documented limit: no upstream keepalive (every upstream connection carried 1 request)" \
    [ "$(awk '$3 != "c=1"' "$WORK/out/hits" | wc -l)" = 0 ]
hits "/ewma/?[1-4]"
check "load_balance ewma is accepted (served round robin)" [ "$(count "127.0.0.2:$B")" = 4 ]

section "endpoint change without reload"
W1=$(workers)
api POST /configuration/backends "{\"version\":2,\"backends\":[{\"name\":\"default_rr_80\",\"endpoints\":[$(ep 127.0.0.4 $B),$(ep 127.0.0.5 $B)]}]}" >/dev/null
hits "/rr/?[1-100]"   # immediately, no sleep
check "the very next requests only reach the 2 new endpoints" \
    [ "$(count "127.0.0.4:$B")" -ge 45 -a "$(count "127.0.0.5:$B")" -ge 45 -a "$(total)" = 100 ]
check "worker pids unchanged (no reload)" [ "$W1" = "$(workers)" ]
api POST /configuration/backends "{\"version\":3,\"backends\":[{\"name\":\"default_rr_80\",\"endpoints\":[$EPS4]}]}" >/dev/null
hits "/rr/?[1-100]"
check "and back to 4 endpoints at once" [ "$(distinct)" = 4 -a "$(total)" = 100 ]
check "  ... still the same workers" [ "$W1" = "$(workers)" ]

section "concurrent writers (two workers, one lock)"
api GET /configuration/version >/dev/null
G0=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['backends']['generation'])" "$WORK/out/api")
pids=()
for i in $(seq 1 20); do
    curl -s -o "$WORK/out/conc.$i" -w '%{http_code}\n' --unix-socket "$SOCK" -H "Authorization: Bearer $TOKEN" \
        --data-binary "{\"version\":$((100 + i)),\"backends\":[{\"name\":\"conc-$i\",\"endpoints\":[$(ep 127.0.0.2 $B)]}]}" \
        http://x/configuration/backends > "$WORK/out/conc.status.$i" &
    pids+=($!)
done
wait "${pids[@]}"
check "20 parallel POSTs -> 20 x 201" [ "$(cat "$WORK/out/conc.status."* | grep -c '^201$')" = 20 ]
api GET /configuration/version >/dev/null
G1=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['backends']['generation'])" "$WORK/out/api")
check "  ... generation advanced by exactly 20 ($G0 -> $G1: no lost update)" [ "$G1" = $((G0 + 20)) ]
check "  ... all 20 backends stored, no temp files or lock left" \
    [ "$(ls "$WORK/run/ferrule-state/b" | grep -c '\.json$')" = 29 -a \
      -z "$(find "$WORK/run/ferrule-state" -name '*.tmp.*' -o -name lock)" ]

section "a lock left by a worker killed mid-write"
# a pid that does not exist (above pid_max): the next writer breaks the lock at once
echo 4194304 > "$WORK/run/ferrule-state/lock"
S=$(api POST /configuration/backends "{\"version\":200,\"backends\":[{\"name\":\"after-crash\",\"endpoints\":[$(ep 127.0.0.2 $B)]}]}")
check "a POST after a dead writer's lock -> 201 at once" [ "$S" = 201 ]
check "  ... and no lock left" [ ! -e "$WORK/run/ferrule-state/lock" ]
# a live process's lock (this shell's) is respected
echo $$ > "$WORK/run/ferrule-state/lock"
S=$(api POST /configuration/backends "{\"version\":201,\"backends\":[{\"name\":\"held\",\"endpoints\":[$(ep 127.0.0.2 $B)]}]}")
check "a live writer's lock is waited for, then 503" [ "$S" = 503 ]
rm -f "$WORK/run/ferrule-state/lock"

section "503 for unknown backends and backends without endpoints"
check "unknown backend -> 503" [ "$(status "$PROXY/unknown/")" = 503 ]
check "backend with no endpoints -> 503" [ "$(status "$PROXY/empty/")" = 503 ]
check "\$ferrule_backend not set -> 503" [ "$(status -H 'Host: unset.test' "$PROXY/unset/")" = 503 ]
api POST /configuration/backends '{"version":4,"backends":[],"removed":["default_rr_80"]}' >/dev/null
check "removed backend -> 503 at once" [ "$(status "$PROXY/rr/")" = 503 ]

section "documented limit: no retry to the next peer"
hits "/dead/?[1-40]" -w '%{http_code}\n'
OK200=$(grep -c '^200$' "$WORK/out/hits")
BAD502=$(grep -c '^502$' "$WORK/out/hits")
echo "    one of 2 endpoints refuses connections: $OK200 x 200, $BAD502 x 502"
check "requests routed to the dead endpoint fail with 502 (20), the others succeed (20)" \
    [ "$OK200" = 20 -a "$BAD502" = 20 ]

# ---------------------------------------------------------------- 5. hash
section "consistent hash by \$arg_user"
hits "/hash/?user=u[1-300]"
awk '{print $2, $1}' "$WORK/out/hits" | sort > "$WORK/out/hash1"
python3 - "$PROXY_PORT" > "$WORK/out/hits" <<'EOF'
import http.client, sys
for i in range(1, 301):
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
    c.request("GET", f"/hash/?user=u{i}", headers={"Connection": "close"})
    sys.stdout.write(c.getresponse().read().decode())
    c.close()
EOF
awk '{print $2, $1}' "$WORK/out/hits" | sort > "$WORK/out/hash2"
check "each user sticks to one endpoint (again, on new connections, both workers)" cmp -s "$WORK/out/hash1" "$WORK/out/hash2"
echo "    $(awk '{print $2}' "$WORK/out/hash1" | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}')"
check "users spread over all 3 endpoints (>= 60 each)" \
    [ "$(awk '{print $2}' "$WORK/out/hash1" | sort | uniq -c | awk '$1 >= 60' | wc -l)" = 3 ]
api POST /configuration/backends "{\"version\":5,\"backends\":[{\"name\":\"default_hash_80\",\"upstream_hash_by\":\"\$arg_user\",\"endpoints\":[$(ep 127.0.0.5 $B),$(ep 127.0.0.4 $B),$(ep 127.0.0.3 $B),$(ep 127.0.0.2 $B)]}]}" >/dev/null
hits "/hash/?user=u[1-300]"
awk '{print $2, $1}' "$WORK/out/hits" | sort > "$WORK/out/hash3"
read -r MOVED MOVED_ELSEWHERE < <(join "$WORK/out/hash1" "$WORK/out/hash3" |
    awk -v n="127.0.0.5:$B" '$2 != $3 { m++; if ($3 != n) e++ } END { print m+0, e+0 }')
echo "    adding a 4th peer (endpoint order reversed) moved $MOVED/300 users (ideal ~75)"
check "adding a peer moves few keys (20..120 of 300)" [ "$MOVED" -le 120 -a "$MOVED" -ge 20 ]
check "moved keys all went to the new peer" [ "$MOVED_ELSEWHERE" = 0 ]

# ---------------------------------------------------------------- 6. affinity
section "cookie affinity"
curl -s -D "$WORK/out/h1" -c "$WORK/out/jar" "$PROXY/sticky/" > "$WORK/out/hits"
FIRST=$(awk '{print $1}' "$WORK/out/hits")
check "first response sets route cookie (opaque id, Path, Max-Age, HttpOnly)" \
    grep -qiE '^Set-Cookie: route=[0-9a-f]{32}; Path=/; Max-Age=3600; HttpOnly' "$WORK/out/h1"
check "  ... exactly one Set-Cookie" [ "$(grep -ci '^Set-Cookie' "$WORK/out/h1")" = 1 ]
check "  ... and the id is md5(addr:port), as with the Lua balancer" \
    grep -qi "route=$(printf '%s' "$FIRST" | md5sum | cut -c1-32)" "$WORK/out/h1"
hits "/sticky/?[1-30]" -b "$WORK/out/jar" -D "$WORK/out/h2"
check "30 requests with the cookie stick to $FIRST" [ "$(count "$FIRST")" = 30 ]
check "  ... and get no new cookie" bash -c "! grep -qi '^Set-Cookie' '$WORK/out/h2'"
hits "/sticky/?[1-40]"
check "requests without a cookie are spread (round robin)" [ "$(distinct)" = 4 ]
REMAINING=""
for a in 127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5; do
    [ "$a:$B" = "$FIRST" ] || REMAINING="$REMAINING${REMAINING:+,}$(ep $a $B)"
done
api POST /configuration/backends "{\"version\":6,\"backends\":[{\"name\":\"default_sticky_80\",\"endpoints\":[$REMAINING],\"affinity\":{\"mode\":\"cookie\",\"cookie_name\":\"route\",\"max_age\":3600,\"path\":\"/\"}}]}" >/dev/null
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
check "every request answered by primary or canary" [ "$(( CANARY + $(count "127.0.0.2:$B") ))" = 2000 ]
hits "/canary/?[1-50]" -H "X-Canary: always"
check "header always -> canary (50/50)" [ "$(count "127.0.0.3:$B")" = 50 ]
hits "/canary/?[1-50]" -H "X-Canary: never"
check "header never -> primary (50/50)" [ "$(count "127.0.0.2:$B")" = 50 ]
hits "/canary/?[1-50]" -b "canary=always"
check "cookie always -> canary" [ "$(count "127.0.0.3:$B")" = 50 ]
hits "/canary/?[1-50]" -b "canary=never"
check "cookie never -> primary" [ "$(count "127.0.0.2:$B")" = 50 ]
hits "/canary/?[1-50]" -H "X-Canary: never" -b "canary=always"
check "header wins over cookie" [ "$(count "127.0.0.2:$B")" = 50 ]
api POST /configuration/backends "{\"version\":7,\"backends\":[{\"name\":\"default_main_80\",\"endpoints\":[$(ep 127.0.0.2 $B)],\"canary\":{\"backend\":\"default_main-canary_80\",\"weight\":0,\"header\":\"X-Canary\",\"header_value\":\"yes-please\"}}]}" >/dev/null
hits "/canary/?[1-30]" -H "X-Canary: yes-please"
check "header_value exact match -> canary" [ "$(count "127.0.0.3:$B")" = 30 ]
hits "/canary/?[1-30]" -H "X-Canary: always"
check "header_value set: 'always' is just another value -> primary" [ "$(count "127.0.0.2:$B")" = 30 ]
hits "/canary/?[1-30]" -H "X-Canary: Yes-Please"
check "header_value match is case-sensitive -> primary" [ "$(count "127.0.0.2:$B")" = 30 ]
hits "/canary/?[1-30]"
check "no header, weight 0 -> primary" [ "$(count "127.0.0.2:$B")" = 30 ]
api POST /configuration/backends '{"version":8,"removed":["default_main-canary_80"]}' >/dev/null
hits "/canary/?[1-20]" -H "X-Canary: yes-please"
check "canary backend gone -> primary serves" [ "$(count "127.0.0.2:$B")" = 20 ]

# ---------------------------------------------------------------- 8. certificates
section "certificates (ssl_certificate data:\$ferrule_ssl_cert, chosen per handshake)"
W2=$(workers)
check "before any POST: static fallback" grep -q 'CN=static-fallback' <(subject a.example.com)
check "POST certificates -> 201" [ "$(api POST /configuration/certificates "$(jcerts 1 a.example.com=a '*.w.example.com=wild')")" = 201 ]
check "exact host served without reload" grep -q 'CN=a.example.com' <(subject a.example.com)
check "SNI is case-insensitive" grep -q 'CN=a.example.com' <(subject A.Example.COM)
check "wildcard *.w.example.com serves x.w.example.com" grep -q 'CN=\*.w.example.com' <(subject x.w.example.com)
check "wildcard covers one label only (y.x.w.example.com -> fallback)" grep -q 'CN=static-fallback' <(subject y.x.w.example.com)
check "unknown host without a default -> static fallback" grep -q 'CN=static-fallback' <(subject other.example.org)
check "rotation POST -> 201" [ "$(api POST /configuration/certificates "$(jcerts 2 a.example.com=a2 default=dflt)")" = 201 ]
check "rotated certificate served at once (serial 4242 = 0x1092)" grep -q 'serial=1092' <(subject a.example.com)
check "posted default serves unknown hosts" grep -q 'CN=ferrule-default' <(subject other.example.org)
check "posted default serves clients without SNI" grep -q 'CN=ferrule-default' <(subject "")
check "RSA certificate with a PKCS#1 key and EC P-384 with a SEC1 key -> 201" \
    [ "$(api POST /configuration/certificates "$(jcerts 3 rsa.example.com=rsa sec1.example.com=sec1)")" = 201 ]
check "  ... RSA served" grep -q 'CN=rsa.example.com' <(subject rsa.example.com)
check "  ... SEC1 EC served" grep -q 'CN=sec1.example.com' <(subject sec1.example.com)
check "removal POST -> 201" [ "$(api POST /configuration/certificates "$(jcerts 4 rm=a.example.com)")" = 201 ]
check "removed host falls back to the default" grep -q 'CN=ferrule-default' <(subject a.example.com)
check "broken PEM -> 400" [ "$(api POST /configuration/certificates '{"version":5,"certificates":[{"host":"b.example.com","cert":"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n","key":"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}]}')" = 400 ]
python3 - "$WORK/certs" > "$WORK/out/mismatch.json" <<'EOF'
import json, sys
d = sys.argv[1]
print(json.dumps({"version": 6, "certificates": [
    {"host": "ok.example.com", "cert": open(f"{d}/dflt.crt").read(), "key": open(f"{d}/dflt.key").read()},
    {"host": "m.example.com", "cert": open(f"{d}/a.crt").read(), "key": open(f"{d}/wild.key").read()}]}))
EOF
check "certificate with a key that does not match -> 400" \
    [ "$(api POST /configuration/certificates "$(cat "$WORK/out/mismatch.json")")" = 400 ]
check "  ... and says so" grep -q 'certificates\[1\]: m.example.com: private key does not match' "$WORK/out/api"
python3 - "$WORK/certs" > "$WORK/out/mismatch2.json" <<'EOF'
import json, sys
d = sys.argv[1]
print(json.dumps({"version": 7, "certificates": [
    {"host": "m.example.com", "cert": open(f"{d}/rsa.crt").read(), "key": open(f"{d}/a.key").read()}]}))
EOF
check "RSA certificate with an EC key -> 400" \
    [ "$(api POST /configuration/certificates "$(cat "$WORK/out/mismatch2.json")")" = 400 ]
check "GET certificates -> 200" [ "$(api GET /configuration/certificates)" = 200 ]
check "  ... nothing of the rejected POSTs was written (ok.example.com absent)" \
    bash -c "! grep -q ok.example.com '$WORK/out/api'"
check "  ... lists hosts" grep -q '\*.w.example.com' "$WORK/out/api"
check "  ... never keys" bash -c "! grep -qi 'PRIVATE\|BEGIN' '$WORK/out/api'"
check "certificate files are private (dirs 0700, files 0600)" \
    [ -z "$(find "$WORK/run/ferrule-state/c" "$WORK/run/ferrule-state/p" -type f ! -perm 600)" -a \
      "$(stat -c %a "$WORK/run/ferrule-state/c" "$WORK/run/ferrule-state/p" | sort -u)" = 700 ]
check "HTTPS traffic is proxied too" grep -qE "^(127.0.0|::1)" <(curl -sk --resolve "x.w.example.com:$TLS_PORT:127.0.0.1" "https://x.w.example.com:$TLS_PORT/")
check "worker pids unchanged by certificate changes" [ "$W2" = "$(workers)" ]

# ---------------------------------------------------------------- 8b. shared pairs
section "certificates shared by many hosts: each pair stored once (STATE/p/<sha256>.json)"
STATE="$WORK/run/ferrule-state"
records() { ls "$STATE/c" | grep -c '\.json$'; }
pairs() { ls "$STATE/p" | grep -c '\.json$'; }
# holding NAME: how many pair files hold certificate NAME (its first base64 line)
holding() { grep -lF "$(sed -n 2p "$WORK/certs/$1.crt")" "$STATE"/p/*.json 2>/dev/null | wc -l; }
hosts() { # hosts FROM TO PAIR|rm -> "sFROM.shared.example.com=PAIR ..." (or "rm=...")
    local i
    for i in $(seq "$1" "$2"); do
        if [ "$3" = rm ]; then printf 'rm=s%d.shared.example.com ' "$i"
        else printf 's%d.shared.example.com=%s ' "$i" "$3"; fi
    done
}
# serves PATTERN SNI...: every SNI gets a certificate matching PATTERN
serves() {
    local want=$1 sni
    shift
    for sni in "$@"; do grep -q "$want" <(subject "$sni") || return 1; done
}
mkcert shared shared.example.com
mkcert shared2 shared.example.com -set_serial 4243
R0=$(records)
P0=$(pairs)
# shellcheck disable=SC2046 # one argument per host
check "50 hosts sharing one pair -> 201" \
    [ "$(api POST /configuration/certificates "$(jcerts 10 $(hosts 1 50 shared))")" = 201 ]
check "  ... 50 new host records and exactly one new pair file ($R0+50, $P0+1)" \
    [ "$(records)" = $((R0 + 50)) -a "$(pairs)" = $((P0 + 1)) -a "$(holding shared)" = 1 ]
check "  ... host records are small and hold no PEM" \
    [ -z "$(find "$STATE/c" -name 's*.shared.example.com.json' -size +300c)" -a \
      -z "$(grep -l 'BEGIN' "$STATE/c/"*.json)" ]
check "  ... served by SNI (s1, s50)" serves 'CN=shared.example.com' s1.shared.example.com s50.shared.example.com
check "  ... other hosts unchanged (wildcard, default)" \
    eval "serves 'CN=\*.w.example.com' x.w.example.com && serves 'CN=ferrule-default' other.example.org"
PAIR1=$(grep -lF "$(sed -n 2p "$WORK/certs/shared.crt")" "$STATE"/p/*.json)
INODE1=$(stat -c %i "$PAIR1")
# shellcheck disable=SC2046
api POST /configuration/certificates "$(jcerts 11 $(hosts 1 50 shared))" >/dev/null
check "posting the same 50 again leaves the pair file as it was (not rewritten)" \
    [ "$(stat -c %i "$PAIR1" 2>/dev/null)" = "$INODE1" -a "$(pairs)" = $((P0 + 1)) ]

# shellcheck disable=SC2046
check "rotating 10 of the 50 to another pair -> 201" \
    [ "$(api POST /configuration/certificates "$(jcerts 12 $(hosts 1 10 shared2))")" = 201 ]
check "  ... one new pair file; the old one stays for the other 40" \
    [ "$(pairs)" = $((P0 + 2)) -a "$(holding shared)" = 1 -a "$(holding shared2)" = 1 -a "$(records)" = $((R0 + 50)) ]
check "  ... rotated hosts serve the new pair (serial 4243 = 0x1093)" serves 'serial=1093' s1.shared.example.com s10.shared.example.com
check "  ... the others still the old one" \
    eval "serves 'CN=shared.example.com' s11.shared.example.com s50.shared.example.com && ! serves 'serial=1093' s11.shared.example.com s50.shared.example.com"
# shellcheck disable=SC2046
check "rotating the other 40 -> 201" \
    [ "$(api POST /configuration/certificates "$(jcerts 13 $(hosts 11 50 shared2))")" = 201 ]
check "  ... the old pair, used by no host any more, is deleted" \
    [ "$(pairs)" = $((P0 + 1)) -a "$(holding shared)" = 0 -a "$(holding shared2)" = 1 ]
check "  ... s11 and s50 now serve the new pair" serves 'serial=1093' s11.shared.example.com s50.shared.example.com

# Handshakes while their pair is replaced (a record read, then its pair deleted
# before the pair is read): every one must still serve a pair of this host.
for i in $(seq 1 40); do subject s7.shared.example.com; echo; done > "$WORK/out/during" &
HS=$!
for v in $(seq 20 29); do
    # shellcheck disable=SC2046
    api POST /configuration/certificates "$(jcerts "$v" $(hosts 1 50 "$([ $((v % 2)) = 0 ] && echo shared || echo shared2)"))" >/dev/null
done
wait $HS
check "40 handshakes during 10 rotations of their pair all served it" \
    [ "$(grep -c 'CN=shared.example.com' "$WORK/out/during")" = 40 ]
check "  ... and one pair file is left" [ "$(pairs)" = $((P0 + 1)) -a "$(holding shared2)" = 1 ]

# shellcheck disable=SC2046
check "removing 25 of the 50 hosts -> 201" \
    [ "$(api POST /configuration/certificates "$(jcerts 30 $(hosts 1 25 rm))")" = 201 ]
check "  ... their records are gone, the pair stays for the rest" \
    [ "$(records)" = $((R0 + 25)) -a "$(pairs)" = $((P0 + 1)) ]
check "  ... a removed host gets the default, a remaining one its pair" \
    eval "serves 'CN=ferrule-default' s5.shared.example.com && serves 'serial=1093' s40.shared.example.com"
# shellcheck disable=SC2046
check "removing the other 25 -> 201" \
    [ "$(api POST /configuration/certificates "$(jcerts 31 $(hosts 26 50 rm))")" = 201 ]
check "  ... records and the unreferenced pair deleted (back to $R0 records, $P0 pairs)" \
    [ "$(records)" = "$R0" -a "$(pairs)" = "$P0" -a "$(holding shared2)" = 0 ]
check "  ... no temp files or lock left" [ -z "$(find "$STATE" -name '*.tmp.*' -o -name lock)" ]

section "270 hosts sharing one ~128 KiB pair (one tenant's Secret named by every host)"
# the largest pair the API takes: the certificate repeated as a chain, ~127 KiB
python3 - "$WORK/certs" <<'EOF'
import sys
d = sys.argv[1]
cert, key = open(f"{d}/shared.crt").read(), open(f"{d}/shared.key").read()
open(f"{d}/big.crt", "w").write(cert * ((127 * 1024 - len(key)) // len(cert)))
open(f"{d}/big.key", "w").write(key)
EOF
# shellcheck disable=SC2046
jcerts 40 $(for i in $(seq 1 270); do printf 'm%d.big.example.com=big ' "$i"; done) > "$WORK/out/big270.json"
# bytes: the size of the certificate files; allocated: the blocks they take (KiB)
bytes() { find "$STATE/c" "$STATE/p" -type f -printf '%s\n' 2>/dev/null | awk '{ n += $1 } END { print n + 0 }'; }
allocated() { du -sk "$STATE/c" "$STATE/p" 2>/dev/null | awk '{ n += $1 } END { print n + 0 }'; }
BYTES0=$(bytes)
ALLOC0=$(allocated)
T0=$(date +%s%N)
check "POST 270 hosts with one $(( ($(stat -c %s "$WORK/certs/big.crt") + $(stat -c %s "$WORK/certs/big.key")) / 1024 )) KiB pair -> 201" \
    [ "$(api POST /configuration/certificates "@$WORK/out/big270.json")" = 201 ]
echo "    POST of $(( $(stat -c %s "$WORK/out/big270.json") / 1024 )) KiB took $(( ($(date +%s%N) - T0) / 1000000 )) ms;" \
     "worker peak RSS so far: $(for p in $(workers); do awk '/VmHWM/ {printf "%d MiB ", $2 / 1024}' /proc/$p/status; done)"
echo "    the 270 hosts added $(( $(bytes) - BYTES0 )) bytes ($(( ($(bytes) - BYTES0) / 1024 )) KiB," \
     "$(( $(allocated) - ALLOC0 )) KiB allocated) to the state's certificate files"
check "  ... one pair file for all 270" [ "$(pairs)" = $((P0 + 1)) -a "$(records)" = $((R0 + 270)) ]
check "  ... served (m1, m270)" serves 'CN=shared.example.com' m1.big.example.com m270.big.example.com
# shellcheck disable=SC2046
api POST /configuration/certificates "$(jcerts 41 $(for i in $(seq 1 270); do printf 'rm=m%d.big.example.com ' "$i"; done))" >/dev/null
check "  ... removing them leaves the state as before" [ "$(records)" = "$R0" -a "$(pairs)" = "$P0" ]

# ---------------------------------------------------------------- 9. scale
section "10,000 backends: bulk load, then one change"
big_backends "$WORK/out/big.json"
T0=$(date +%s%N)
check "POST 10k backends -> 201" [ "$(curl -s -o "$WORK/out/api" -w '%{http_code}' --unix-socket "$SOCK" \
    -H "Authorization: Bearer $TOKEN" --data-binary @"$WORK/out/big.json" http://x/configuration/backends)" = 201 ]
echo "    bulk POST of $(( $(stat -c %s "$WORK/out/big.json") / 1024 )) KiB took $(( ($(date +%s%N) - T0) / 1000000 )) ms"
echo "    worker peak RSS so far: $(for p in $(workers); do awk '/VmHWM/ {printf "%d MiB ", $2 / 1024}' /proc/$p/status; done)"
T0=$(date +%s%N)
api POST /configuration/backends "{\"version\":101,\"backends\":[{\"name\":\"default_echo_80\",\"endpoints\":[$(ep 127.0.0.4 $B)]}]}" >/dev/null
hits "/?[1-20]"
echo "    one change among 10k + 20 requests took $(( ($(date +%s%N) - T0) / 1000000 )) ms"
check "the single change is live at once" [ "$(count "127.0.0.4:$B")" = 20 ]

# ---------------------------------------------------------------- wrap up
section "health"
# Rendered as users run it, with per-request metrics (the C module's log phase in
# every location, inherited by the 503's `if` block).
check "metrics on: the C module counted the suite's requests (GET entries in its dump)" \
    eval '[ "$(api GET /configuration/metrics)" = 200 ] && grep -qP "\tGET\t" "$WORK/out/api"'
check "same master and worker pids as at start (no reload, no crash)" [ "$WORKERS_AT_START" = "$(workers)" ]
check "no njs exceptions / alerts in error.log" \
    bash -c "! grep -E 'js exception|peer selection failed|lookup failed|\[alert\]|\[crit\]|\[emerg\]' '$WORK/logs/error.log'"

section "reload keeps the dynamic configuration (state files, same master)"
kill -HUP "$MASTER"
wait_new_workers "$WORKERS_AT_START"
check "new workers after HUP" [ "$(workers)" != "$WORKERS_AT_START" ]
hits "/?[1-20]"
check "backends still routed after reload without re-POSTing" [ "$(count "127.0.0.4:$B")" = 20 ]
check "certificates still served after reload" grep -q 'CN=\*.w.example.com' <(subject x.w.example.com)
check "hash mapping unchanged across reload" \
    bash -c "curl -s '$PROXY/hash/?user=u[1-300]' | awk '{print \$2, \$1}' | sort | cmp -s - '$WORK/out/hash3'"

section "restart: state of a previous master is not served"
stop_nginx
start_nginx
check "new master started" [ -n "$MASTER" ]
check "routes answer 503 until the controller posts again" [ "$(status "$PROXY/")" = 503 ]
check "old certificates are not served (static fallback)" grep -q 'CN=static-fallback' <(subject x.w.example.com)
api GET /configuration/version >/dev/null
check "GET /configuration/version says version null (post everything)" \
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d['backends']['version'] is None and d['certificates']['version'] is None))" "$WORK/out/api"
check "first POST after restart -> 201" \
    [ "$(api POST /configuration/backends "{\"version\":1,\"backends\":[{\"name\":\"default_echo_80\",\"endpoints\":[$(ep 127.0.0.3 $B)]}]}")" = 201 ]
hits "/?[1-5]"
check "  ... serves the new state" [ "$(count "127.0.0.3:$B")" = 5 ]
check "  ... and deleted the previous master's files (backends, host records, pairs)" \
    [ "$(ls "$WORK/run/ferrule-state/b" | wc -l)" = 1 -a "$(ls "$WORK/run/ferrule-state/c" | wc -l)" = 0 -a \
      "$(ls "$WORK/run/ferrule-state/p" | wc -l)" = 0 ]
check "no njs exceptions / alerts in error.log after reload and restart" \
    bash -c "! grep -E 'js exception|peer selection failed|lookup failed|\[alert\]|\[crit\]|\[emerg\]' '$WORK/logs/error.log'"

report
