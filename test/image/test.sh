#!/usr/bin/env bash
# The images `make image` built, checked as a user would run them (make test).
#
#   test/image/test.sh
#
# 1. One package list: image/Containerfile installs exactly image/packages.txt
#    (through xargs, no package named anywhere else), and the mmdebstrap base in
#    target/image/ferrule.oci.tar has every one of them installed per its dpkg
#    status, with the same list in the layer's history.
# 2. The archive: Ferrule's layer holds exactly the staged files
#    (target/image/context/), the config runs /usr/bin/ferrule as 101:101.
# 3. `ctr run` (the e2e node's containerd): the image with a read-only root file
#    system, tmpfs on /var/lib/ferrule and /tmp only, host network, serves
#    standalone mode from a mounted manifests directory to echo backends on
#    loopback; an EndpointSlice edit in the directory moves the traffic; NGINX's
#    access log is on the container's stdout. Once with the Lua balancer, once
#    with njs.
# 4. The same as two containers, as the README runs them without Kubernetes:
#    `ferrule nginx-supervisor` and `ferrule run --nginx-supervisor`, each in its
#    own PID namespace, sharing the host's network and one directory at
#    /var/lib/ferrule. NGINX (the fast path's module checked by `nginx -t` through
#    the supervisor) is the supervisor's child, none of the controller's, and its
#    access log is on the nginx container's stdout; SIGTERM stops both.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
OUT=$ROOT/target/image
CLUSTER=$ROOT/test/e2e/cluster.sh
IMAGE=ferrule.local/ferrule:dev

log() { printf '[image-test] %s\n' "$*" >&2; }
fail() { printf '[image-test] FAIL: %s\n' "$*" >&2; exit 1; }

for f in ferrule.oci.tar echo-bin context/usr/bin/ferrule; do
    [[ -e $OUT/$f ]] || fail "no $OUT/$f: run 'make image' first"
done
[[ $(id -u) == 0 ]] || fail "needs root (containerd, ctr run)"

WORK=$(mktemp -d /tmp/ferrule-image-test.XXXXXX)
PIDS=()
CONTAINER=''
SPLIT=()
cleanup() {
    for c in $CONTAINER "${SPLIT[@]}"; do
        "$CLUSTER" ctr tasks kill --signal SIGKILL "$c" >/dev/null 2>&1 || true
        sleep 0.3
        "$CLUSTER" ctr tasks delete --force "$c" >/dev/null 2>&1 || true
        "$CLUSTER" ctr containers delete "$c" >/dev/null 2>&1 || true
    done
    ((${#PIDS[@]})) && kill "${PIDS[@]}" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

# ---------------------------------------------------------------------------
# 1 + 2: the package list, the layers and the config
# ---------------------------------------------------------------------------
mkdir -p "$WORK/oci"
tar -xf "$OUT/ferrule.oci.tar" -C "$WORK/oci"
python3 - "$ROOT" "$WORK/oci" <<'PY' || fail "package list / archive checks failed (above)"
import gzip, io, json, os, re, shlex, sys, tarfile

root, oci = sys.argv[1], sys.argv[2]
errors = []

def blob(digest):
    algo, hexd = digest.split(":")
    return open(os.path.join(oci, "blobs", algo, hexd), "rb").read()

def packages():
    out = []
    for line in open(os.path.join(root, "image/packages.txt")):
        out += line.split("#")[0].split()
    return out

want = packages()
if not want:
    errors.append("image/packages.txt lists no packages")

# The Containerfile: continuation lines joined, instructions split.
text = open(os.path.join(root, "image/Containerfile")).read()
text = re.sub(r"\\\n", " ", text)
instrs = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]
copies = [i for i in instrs if i.split()[0] == "COPY"]
if not any("image/packages.txt" in c.split()[1:-1] and c.split()[-1].startswith("/tmp/ferrule-image")
           for c in copies):
    errors.append("Containerfile: no 'COPY image/packages.txt ... /tmp/ferrule-image/'")
if not any(c.split()[1:] == ["target/image/context/", "/"] for c in copies):
    errors.append("Containerfile: no 'COPY target/image/context/ /' (the files build.sh stages)")
runs = " && ".join(i[3:] for i in instrs if i.split()[0] == "RUN")
installs = [m.start() for m in re.finditer(r"apt-get\s+install", runs)]
if len(installs) != 1:
    errors.append(f"Containerfile: want exactly one 'apt-get install', found {len(installs)}")
for cmd in re.split(r"&&|;", runs):
    if "apt-get" in cmd and "install" in cmd.split():
        stages = [shlex.split(s) for s in cmd.split("|")]
        feeder, inst = stages[:-1], stages[-1]
        named = [a for a in inst[inst.index("install") + 1:] if not a.startswith("-")]
        if inst[0] != "xargs" or named:
            errors.append(f"Containerfile: apt-get install must take its packages only from "
                          f"image/packages.txt through xargs, got {cmd.strip()!r}")
        if not any("/tmp/ferrule-image/packages.txt" in s for st in feeder for s in st):
            errors.append(f"Containerfile: apt-get install is not fed by packages.txt: {cmd.strip()!r}")
    if "apt-get" in cmd and re.search(r"\b(install|satisfy|build-dep)\b", cmd) is None and \
            "update" not in cmd.split():
        errors.append(f"Containerfile: unexpected apt-get use {cmd.strip()!r}")
if "sh /tmp/ferrule-image/setup.sh" not in runs:
    errors.append("Containerfile: does not run image/setup.sh")

# The archive.
index = json.load(open(os.path.join(oci, "index.json")))
refs = [m for m in index["manifests"]
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "dev"]
if len(refs) != 1:
    sys.exit(f"index.json: want one manifest tagged dev, got {index['manifests']}")
manifest = json.loads(blob(refs[0]["digest"]))
config = json.loads(blob(manifest["config"]["digest"]))
layers = manifest["layers"]
if len(layers) != 2:
    errors.append(f"want 2 layers (base, ferrule), got {len(layers)}")

def layer_tar(desc):
    data = blob(desc["digest"])
    if desc["mediaType"].endswith("gzip"):
        data = gzip.decompress(data)
    return tarfile.open(fileobj=io.BytesIO(data))

base = layer_tar(layers[0])
status = base.extractfile("./var/lib/dpkg/status").read().decode()
installed = {}
for para in status.split("\n\n"):
    f = dict(re.findall(r"^([A-Za-z-]+): (.*)$", para, re.M))
    if "Package" in f:
        installed[f["Package"]] = f.get("Status", "")
for p in want:
    if installed.get(p) != "install ok installed":
        errors.append(f"base layer: {p} (image/packages.txt) is not installed per dpkg status "
                      f"({installed.get(p, 'absent')!r})")
hist = [h for h in config.get("history", []) if not h.get("empty_layer")]
if not hist or not hist[0].get("created_by", "").startswith("mmdebstrap"):
    errors.append(f"base layer history does not name mmdebstrap: {hist[:1]}")
else:
    listed = hist[0]["created_by"].split(":", 1)[1].split("+")[0].split()
    if listed != want:
        errors.append(f"base layer was built with {listed}, image/packages.txt says {want}")
for path in ("./usr/sbin/nginx", "./usr/lib/nginx/modules/ngx_http_lua_module.so",
             "./usr/lib/nginx/modules/ngx_http_js_module.so",
             "./usr/lib/nginx/modules/ndk_http_module.so"):
    try:
        base.getmember(path)
    except KeyError:
        errors.append(f"base layer has no {path}")
for gone in ("./usr/share/doc/nginx-light/changelog.Debian.gz", "./usr/bin/apt-get"):
    if gone in base.getnames():
        errors.append(f"base layer still has {gone}")

ctx = os.path.join(root, "target/image/context")
staged = set()
for d, dirs, files in os.walk(ctx):
    for name in files:
        staged.add("./" + os.path.relpath(os.path.join(d, name), ctx))
top = layer_tar(layers[1])
in_layer = {m.name for m in top.getmembers() if m.isfile()}
if in_layer != staged or staged != {"./usr/bin/ferrule",
                                    "./usr/lib/nginx/modules/ngx_http_ferrule_module.so",
                                    "./usr/lib/nginx/modules/ngx_stream_ferrule_module.so"}:
    errors.append(f"ferrule layer files {sorted(in_layer)} != staged {sorted(staged)}")

cfg = config.get("config", {})
if cfg.get("User") != "101:101":
    errors.append(f"config User {cfg.get('User')!r}, want '101:101'")
if cfg.get("Entrypoint") != ["/usr/bin/ferrule"] or cfg.get("Cmd") != ["run", "--nginx-log-stdio"]:
    errors.append(f"config Entrypoint/Cmd {cfg.get('Entrypoint')} {cfg.get('Cmd')}")

for e in errors:
    print("  -", e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
log "ok: one package list ($(sed 's/#.*//' "$ROOT/image/packages.txt" | xargs)), layers, config"

# ---------------------------------------------------------------------------
# 3: ctr run
# ---------------------------------------------------------------------------
"$CLUSTER" import "$OUT/ferrule.oci.tar=$IMAGE"

port_in_use() { [[ -n $(ss -Htln "sport = :$1" 2>/dev/null) ]]; }
free_port() {
    local p i
    for ((i = 0; i < 200; i++)); do
        p=$((20000 + RANDOM % 12000))
        [[ " $* " == *" $p "* ]] && continue
        port_in_use "$p" || { echo "$p"; return 0; }
    done
    fail "no free port"
}
BACKEND_PORT=$(free_port)
HTTP_PORT=$(free_port "$BACKEND_PORT")
HTTPS_PORT=$(free_port "$BACKEND_PORT" "$HTTP_PORT")
STATUS_PORT=$(free_port "$BACKEND_PORT" "$HTTP_PORT" "$HTTPS_PORT")

for ip in 127.0.0.2 127.0.0.3 127.0.0.4; do
    "$OUT/echo-bin" -listen "$ip:$BACKEND_PORT" >"$WORK/echo-$ip.log" 2>&1 &
    PIDS+=($!)
done

service() { # NAME IP
    cat <<EOF
apiVersion: v1
kind: Service
metadata: {name: $1, namespace: demo}
spec:
  ports: [{name: http, port: 80, targetPort: $BACKEND_PORT}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: $1-1, namespace: demo, labels: {kubernetes.io/service-name: $1}}
addressType: IPv4
ports: [{name: http, port: $BACKEND_PORT}]
endpoints: [{addresses: ["$2"], conditions: {ready: true}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: $1, namespace: demo, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  ingressClassName: ferrule
  rules:
  - host: $1.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: $1, port: {name: http}}}}
EOF
}

# backend_of HOST: the address of the backend that answered through NGINX.
backend_of() {
    curl -s --max-time 3 -H "Host: $1" "http://127.0.0.1:$HTTP_PORT/probe" |
        sed -n 's/.*"backend":"\([0-9.]*\):[0-9]*".*/\1/p'
}

wait_for() { # SECONDS DESCRIPTION COMMAND...
    local deadline=$((SECONDS + $1)) what=$2; shift 2
    until "$@"; do
        ((SECONDS < deadline)) || { tail -n 30 "$WORK/ctr.log" >&2; fail "$what"; }
        sleep 0.2
    done
}

run_image() { # BALANCER
    local balancer=$1 m=$WORK/manifests-$1
    mkdir -p "$m"
    cp "$ROOT/examples/class.yaml" "$m/"
    service a 127.0.0.2 >"$m/a.yaml"
    service b 127.0.0.3 >"$m/b.yaml"
    CONTAINER=ferrule-image-test-$$-$balancer
    log "ctr run $IMAGE ($balancer balancer, read-only root, host network, :$HTTP_PORT)"
    "$CLUSTER" ctr run --rm --net-host --read-only \
        --mount "type=bind,src=$m,dst=/manifests,options=rbind:ro" \
        --mount type=tmpfs,src=tmpfs,dst=/var/lib/ferrule,options=mode=0755:uid=101:gid=101 \
        --mount type=tmpfs,src=tmpfs,dst=/tmp,options=mode=1777 \
        "$IMAGE" "$CONTAINER" \
        /usr/bin/ferrule run --nginx-log-stdio --manifests /manifests --balancer "$balancer" \
        --listen-address 127.0.0.1 --http-port "$HTTP_PORT" --https-port "$HTTPS_PORT" \
        --status-address 127.0.0.1 --status-port "$STATUS_PORT" --allow-local-endpoints \
        </dev/null >"$WORK/ctr.log" 2>&1 &
    local ctr_pid=$!
    ready() {
        kill -0 "$ctr_pid" 2>/dev/null || { cat "$WORK/ctr.log" >&2; fail "the container exited"; }
        [[ $(curl -s --max-time 2 "http://127.0.0.1:$STATUS_PORT/readyz" 2>/dev/null) == ready ]]
    }
    wait_for 60 "ferrule in the container not ready on :$STATUS_PORT after 60 s" ready

    # Who runs: uid 101 for ferrule and the NGINX master.
    local pid uid
    pid=$("$CLUSTER" ctr tasks list | awk -v c="$CONTAINER" '$1 == c { print $2 }')
    [[ -n $pid ]] || fail "no task for $CONTAINER"
    uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
    [[ $uid == 101 ]] || fail "ferrule runs as uid $uid, want 101"
    uid=$(ps -o uid= --ppid "$pid" | awk '{print $1}' | sort -u | tr '\n' ' ')
    [[ $uid == "101 " ]] || fail "NGINX master runs as uid '$uid', want 101"

    local got
    got=$(backend_of a.test)
    [[ $got == 127.0.0.2 ]] || fail "a.test answered by '$got', want 127.0.0.2"
    got=$(backend_of b.test)
    [[ $got == 127.0.0.3 ]] || fail "b.test answered by '$got', want 127.0.0.3"
    # A changed EndpointSlice in the mounted directory reaches NGINX.
    service b 127.0.0.4 >"$m/b.yaml.tmp" && mv "$m/b.yaml.tmp" "$m/b.yaml"
    moved() { [[ $(backend_of b.test) == 127.0.0.4 ]]; }
    wait_for 20 "b.test still not answered by 127.0.0.4 20 s after its EndpointSlice changed" moved
    [[ $(backend_of a.test) == 127.0.0.2 ]] || fail "a.test moved off 127.0.0.2"

    # Logs: Ferrule's and NGINX's access log on the container's stdio.
    grep -q 'readiness changed ready=true' "$WORK/ctr.log" || fail "no Ferrule log on the container's stderr"
    # The access log is buffered (access-log-params): written within a second.
    logged() { grep -q '"GET /probe HTTP/1.1" 200' "$WORK/ctr.log"; }
    logged || sleep 2
    logged || { cat "$WORK/ctr.log" >&2; fail "no NGINX access log line on the container's stdout"; }
    if [[ $balancer == lua ]]; then
        grep -q 'C fast path for plain backends' "$WORK/ctr.log" ||
            { cat "$WORK/ctr.log" >&2; fail "NGINX in the image did not load ngx_http_ferrule_module.so"; }
    fi

    "$CLUSTER" ctr tasks kill --signal SIGTERM "$CONTAINER" >/dev/null
    local i
    for ((i = 0; i < 100; i++)); do
        kill -0 "$ctr_pid" 2>/dev/null || break
        sleep 0.2
    done
    kill -0 "$ctr_pid" 2>/dev/null && fail "the container did not stop within 20 s of SIGTERM"
    CONTAINER=''
    log "ok: $balancer balancer: a.test -> 127.0.0.2, b.test -> 127.0.0.3 then 127.0.0.4"
}

task_pid() { "$CLUSTER" ctr tasks list | awk -v c="$1" '$1 == c { print $2 }'; }
children() { ps -o pid=,args= --ppid "$1"; }

run_split() {
    local m=$WORK/manifests-split shared=$WORK/shared
    mkdir -p "$m" "$shared"
    chown 101:101 "$shared"
    cp "$ROOT/examples/class.yaml" "$m/"
    service a 127.0.0.2 >"$m/a.yaml"
    local nginx=ferrule-image-test-$$-nginx controller=ferrule-image-test-$$-controller
    SPLIT=("$nginx" "$controller")
    log "ctr run $IMAGE twice: nginx-supervisor and run --nginx-supervisor, one shared directory"
    "$CLUSTER" ctr run --rm --net-host --read-only \
        --mount "type=bind,src=$shared,dst=/var/lib/ferrule,options=rbind:rw" \
        "$IMAGE" "$nginx" \
        /usr/bin/ferrule nginx-supervisor --socket=/var/lib/ferrule/supervisor.sock \
        </dev/null >"$WORK/nginx.log" 2>&1 &
    local nginx_ctr=$!
    "$CLUSTER" ctr run --rm --net-host --read-only \
        --mount "type=bind,src=$m,dst=/manifests,options=rbind:ro" \
        --mount "type=bind,src=$shared,dst=/var/lib/ferrule,options=rbind:rw" \
        --mount type=tmpfs,src=tmpfs,dst=/tmp,options=mode=1777 \
        "$IMAGE" "$controller" \
        /usr/bin/ferrule run --nginx-log-stdio --manifests /manifests \
        --nginx-supervisor=/var/lib/ferrule/supervisor.sock \
        --listen-address 127.0.0.1 --http-port "$HTTP_PORT" --https-port "$HTTPS_PORT" \
        --status-address 127.0.0.1 --status-port "$STATUS_PORT" --allow-local-endpoints \
        </dev/null >"$WORK/ctr.log" 2>&1 &
    local controller_ctr=$!
    ready() {
        kill -0 "$controller_ctr" 2>/dev/null || { cat "$WORK/ctr.log" >&2; fail "the controller container exited"; }
        kill -0 "$nginx_ctr" 2>/dev/null || { cat "$WORK/nginx.log" >&2; fail "the nginx container exited"; }
        [[ $(curl -s --max-time 2 "http://127.0.0.1:$STATUS_PORT/readyz" 2>/dev/null) == ready ]]
    }
    wait_for 60 "the split containers not ready on :$STATUS_PORT after 60 s" ready
    local got
    got=$(backend_of a.test)
    [[ $got == 127.0.0.2 ]] || fail "a.test answered by '$got', want 127.0.0.2"

    # NGINX is the supervisor's (as uid 101), and the controller runs nothing.
    local supervisor pid
    supervisor=$(task_pid "$nginx")
    pid=$(task_pid "$controller")
    [[ -n $supervisor && -n $pid ]] || fail "no tasks for $nginx and $controller"
    children "$supervisor" | grep -q 'nginx: master process' ||
        fail "NGINX's master is not the supervisor's child: $(children "$supervisor")"
    [[ -z $(children "$pid") ]] || fail "the controller runs processes: $(children "$pid")"
    [[ $(ps -o uid= --ppid "$supervisor" | sort -u | xargs) == 101 ]] ||
        fail "NGINX does not run as uid 101"
    [[ $(readlink "/proc/$supervisor/ns/pid") != "$(readlink "/proc/$pid/ns/pid")" ]] ||
        fail "the two containers share a PID namespace"
    grep -q 'C fast path for plain backends' "$WORK/ctr.log" ||
        { cat "$WORK/ctr.log" >&2; fail "nginx -t through the supervisor did not load ngx_http_ferrule_module.so"; }
    logged() { grep -q '"GET /probe HTTP/1.1" 200' "$WORK/nginx.log"; }
    logged || sleep 2
    logged || { cat "$WORK/nginx.log" >&2; fail "no NGINX access log line on the nginx container's stdout"; }

    # SIGTERM to both, as a pod's deletion sends it: both stop.
    "$CLUSTER" ctr tasks kill --signal SIGTERM "$nginx" >/dev/null
    "$CLUSTER" ctr tasks kill --signal SIGTERM "$controller" >/dev/null
    local i
    for ((i = 0; i < 100; i++)); do
        kill -0 "$controller_ctr" 2>/dev/null || kill -0 "$nginx_ctr" 2>/dev/null || break
        sleep 0.2
    done
    kill -0 "$controller_ctr" 2>/dev/null && fail "the controller did not stop within 20 s of SIGTERM"
    kill -0 "$nginx_ctr" 2>/dev/null && { cat "$WORK/nginx.log" >&2; fail "the supervisor did not stop within 20 s of SIGTERM"; }
    SPLIT=()
    log "ok: two containers: a.test -> 127.0.0.2, NGINX the supervisor's, the fast path checked there"
}

t0=$SECONDS
run_image lua
run_image njs
run_split
log "passed in $((SECONDS - t0)) s"
