#!/usr/bin/env bash
# `make image`: Ferrule's OCI images, built without a container registry.
#
#   image/build.sh [--no-import]
#
# 1. The base root file system: mmdebstrap from Debian bookworm (variant
#    essential) with the packages of image/packages.txt, then image/setup.sh inside
#    it. Cached in ~/.cache/ferrule-image (FERRULE_IMAGE_CACHE) under a key of the
#    package list, the setup script, this recipe and the host's nginx-dev version.
# 2. The files Ferrule adds, staged in target/image/context/ (the Containerfile
#    copies the same directory): /usr/bin/ferrule (the release binary, which
#    carries the Lua and njs sources and the templates) and
#    /usr/lib/nginx/modules/ngx_http_ferrule_module.so and ngx_stream_ferrule_module.so
#    (nginx-module/build.sh).
# 3. umoci assembles the layers into an OCI layout and it is archived as
#    target/image/ferrule.oci.tar; likewise the sandbox image built from
#    kubernetes' pause.c (target/image/pause.oci.tar) and the echo backend of the
#    cluster tests (image/echo, target/image/echo.oci.tar).
# 4. Unless --no-import, each archive is imported into the test cluster's
#    containerd (namespace k8s.io) by `test/e2e/cluster.sh import`, which starts
#    that containerd when it is not running.
#
# Nothing is rebuilt or re-imported when its inputs did not change.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/.." && pwd -P)
OUT=$ROOT/target/image
CACHE=${FERRULE_IMAGE_CACHE:-${HOME:-/root}/.cache/ferrule-image}
FERRULE_BIN=${FERRULE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/ferrule}
K8S_VERSION=${FERRULE_E2E_K8S_VERSION:-v1.35.4}
GOMODCACHE_DIR=${GOMODCACHE:-${HOME:-/root}/go/pkg/mod}
PAUSE_SRC=${FERRULE_PAUSE_SRC:-$GOMODCACHE_DIR/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c}

# Image names (what pods and `ctr run` use). Kept in step with test/e2e/cluster.sh.
FERRULE_IMAGE=ferrule.local/ferrule:dev
ECHO_IMAGE=ferrule.local/echo:dev
PAUSE_IMAGE=ferrule.local/pause:dev

SUITE=bookworm
MIRRORS=(
    "deb http://deb.debian.org/debian $SUITE main"
    "deb http://deb.debian.org/debian $SUITE-updates main"
    "deb http://deb.debian.org/debian-security $SUITE-security main"
)
# Changing how the base is made changes this, and so the cache key.
BASE_RECIPE="mmdebstrap --variant=essential $SUITE ${MIRRORS[*]} dpkg path-exclude doc/man/locale merged-usr-hook v2"
# A fixed creation time: the same inputs give the same image digest.
CREATED=1970-01-01T00:00:00Z

if [[ -n ${GO:-} ]]; then :
elif command -v go >/dev/null 2>&1; then GO=$(command -v go)
else GO=/usr/local/go/bin/go
fi

log() { printf '[image] %s\n' "$*" >&2; }
die() { printf '[image] ERROR: %s\n' "$*" >&2; exit 1; }

need() {
    local t
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || die "required tool '$t' not found (make deps installs it)"
    done
}

# The package list without comments and blank lines, one name per line.
packages() { sed 's/#.*//' "$HERE/packages.txt" | tr -s ' \t' '\n' | sed '/^$/d'; }

# A layer tar of DIR's contents, owned by root, in a stable order.
layer_tar() { # DIR OUT
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix \
        --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
        -C "$1" -cf "$2" .
}

# ---------------------------------------------------------------------------
# 1. The base root file system
# ---------------------------------------------------------------------------
base_key() {
    { cat "$HERE/packages.txt" "$HERE/setup.sh"; echo "$BASE_RECIPE"
      dpkg-query -W -f '${Version}\n' nginx-dev 2>/dev/null || echo no-nginx-dev; } |
        sha256sum | cut -c1-16
}

build_base() { # OUT-TAR
    local out=$1 tmp
    local -a pkgs
    mapfile -t pkgs < <(packages)
    ((${#pkgs[@]})) || die "$HERE/packages.txt lists no packages"
    mkdir -p "$(dirname "$out")"
    tmp=$(mktemp "$out.XXXXXX")
    log "mmdebstrap $SUITE with ${pkgs[*]} (about a minute)"
    # shellcheck disable=SC2016 # $1 is the hook's, expanded by mmdebstrap's shell
    # merged-usr hook: /usr merged by symlinks, without the usrmerge package (and
    # the perl it pulls in).
    if ! mmdebstrap --quiet --mode=root --variant=essential --format=tar \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --include="$(IFS=,; echo "${pkgs[*]}")" \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook="copy-in $HERE/setup.sh /tmp" \
        --customize-hook='chroot "$1" sh /tmp/setup.sh' \
        --customize-hook='rm -f "$1/tmp/setup.sh"' \
        "$SUITE" "$tmp" "${MIRRORS[@]}" >"$out.log" 2>&1; then
        rm -f "$tmp"
        tail -n 40 "$out.log" >&2
        die "mmdebstrap failed (full log: $out.log)"
    fi
    mv -f "$tmp" "$out"
}

ensure_base() { # prints the path of the cached base tar
    local key path
    key=$(base_key)
    path=$CACHE/base-$SUITE-$key.tar
    if [[ ! -s $path || -n ${FERRULE_IMAGE_REFRESH:-} ]]; then
        build_base "$path"
    fi
    # The C module is built against the host's nginx-dev: the image must have the
    # same NGINX, or NGINX refuses to load the module.
    local host image
    host=$(dpkg-query -W -f '${Version}' nginx-dev)
    image=$(tar -xOf "$path" ./var/lib/dpkg/status |
        awk -v RS= '/(^|\n)Package: nginx-light\n/' | sed -n 's/^Version: //p')
    [[ $host == "$image" ]] || die "the base has nginx-light $image but the module would be built \
against nginx-dev $host; run 'apt-get install --only-upgrade nginx-dev nginx-light' or \
FERRULE_IMAGE_REFRESH=1 make image"
    echo "$path"
}

# ---------------------------------------------------------------------------
# Assembling OCI archives
# ---------------------------------------------------------------------------
# assemble NAME STAMP LAYER... -- UMOCI-CONFIG-ARGS...: target/image/NAME.oci.tar
# tagged "dev", rebuilt only when STAMP (a digest of every input) changed. Each
# LAYER is TAR or TAR:DESCRIPTION (the history entry).
assemble() {
    local name=$1 stamp=$2; shift 2
    local -a layers=()
    while (($#)) && [[ $1 != -- ]]; do layers+=("$1"); shift; done
    shift
    local archive=$OUT/$name.oci.tar
    if [[ -s $archive && $(cat "$archive.stamp" 2>/dev/null) == "$stamp" ]]; then
        log "$name: up to date ($archive)"
        return 0
    fi
    local layout=$OUT/$name.oci l
    rm -rf "$layout"
    umoci init --layout "$layout"
    umoci new --image "$layout:dev"
    for l in "${layers[@]}"; do
        umoci raw add-layer --image "$layout:dev" --history.created "$CREATED" \
            --history.created_by "${l#*:}" "${l%%:*}"
    done
    umoci config --no-history --image "$layout:dev" --created "$CREATED" \
        --os linux --architecture amd64 "$@"
    umoci gc --layout "$layout"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$layout" \
        -cf "$archive.tmp" .
    mv -f "$archive.tmp" "$archive"
    rm -rf "$layout"
    echo "$stamp" >"$archive.stamp"
    log "$name: $archive ($(du -h "$archive" | cut -f1))"
}

stamp_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

# ---------------------------------------------------------------------------
# 2./3. The images
# ---------------------------------------------------------------------------
build_ferrule() {
    local base=$1 ctx=$OUT/context mod=$OUT/module
    [[ -x $FERRULE_BIN ]] || die "no release binary at $FERRULE_BIN (run: cargo build --release --bin ferrule)"
    # Ferrule's C module against the installed NGINX (idempotent: build.sh keeps a stamp).
    bash "$ROOT/nginx-module/build.sh" "$mod"
    rm -rf "$ctx"
    install -D -m 0755 "$FERRULE_BIN" "$ctx/usr/bin/ferrule"
    for so in ngx_http_ferrule_module.so ngx_stream_ferrule_module.so; do
        install -D -m 0644 "$mod/$so" "$ctx/usr/lib/nginx/modules/$so"
    done
    layer_tar "$ctx" "$OUT/ferrule-layer.tar"
    assemble ferrule "$(stamp_of "$base" "$OUT/ferrule-layer.tar" "$0")" \
        "$base:mmdebstrap $SUITE: $(packages | tr '\n' ' ')+ image/setup.sh" \
        "$OUT/ferrule-layer.tar:ferrule, ngx_http_ferrule_module.so, ngx_stream_ferrule_module.so" -- \
        --config.user 101:101 \
        --config.entrypoint /usr/bin/ferrule --config.cmd run --config.cmd --nginx-log-stdio \
        --config.workingdir /var/lib/ferrule \
        --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --config.exposedports 80/tcp --config.exposedports 443/tcp \
        --config.exposedports 10254/tcp \
        --config.label org.opencontainers.image.title=ferrule \
        --config.label org.opencontainers.image.source=https://github.com/ferrule/ferrule
}

build_pause() {
    local dir=$OUT/pause-root moddir
    if [[ ! -f $PAUSE_SRC && -z ${FERRULE_PAUSE_SRC:-} ]]; then
        # The kubernetes sources, from the Go module proxy into the module cache
        # (test/e2e/cluster.sh build fetches the same module).
        log "fetching k8s.io/kubernetes@$K8S_VERSION for build/pause (go mod download)"
        moddir=$(cd "$OUT" && GOFLAGS='' GOWORK=off GOTOOLCHAIN=local \
            "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
            sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p') ||
            die "go mod download k8s.io/kubernetes@$K8S_VERSION failed"
        PAUSE_SRC=$moddir/build/pause/linux/pause.c
    fi
    [[ -f $PAUSE_SRC ]] || die "no $PAUSE_SRC (set FERRULE_PAUSE_SRC to kubernetes' build/pause/linux/pause.c)"
    rm -rf "$dir" && mkdir -p "$dir"
    gcc -Os -Wall -Werror -static -DVERSION="$K8S_VERSION-ferrule" -o "$dir/pause" "$PAUSE_SRC" ||
        die "gcc could not build $PAUSE_SRC statically (libc6-dev provides libc.a)"
    strip "$dir/pause"
    layer_tar "$dir" "$OUT/pause-layer.tar"
    assemble pause "$(stamp_of "$OUT/pause-layer.tar" "$0")" \
        "$OUT/pause-layer.tar:pause.c of kubernetes $K8S_VERSION, gcc -static" -- \
        --config.user 65535:65535 --config.entrypoint /pause
}

build_echo() {
    local dir=$OUT/echo-root
    rm -rf "$dir" && mkdir -p "$dir"
    (cd "$HERE/echo" && CGO_ENABLED=0 GOFLAGS='' GOWORK=off GO111MODULE=on GOTOOLCHAIN=local \
        nice "$GO" build -trimpath -ldflags='-s -w' -o "$dir/echo" main.go) ||
        die "go build of image/echo failed"
    cp "$dir/echo" "$OUT/echo-bin"
    layer_tar "$dir" "$OUT/echo-layer.tar"
    assemble echo "$(stamp_of "$OUT/echo-layer.tar" "$0")" \
        "$OUT/echo-layer.tar:image/echo, go build" -- \
        --config.user 65534:65534 --config.entrypoint /echo \
        --config.exposedports 8080/tcp
}

main() {
    local import=1
    case ${1:-} in
        --no-import) import='' ;;
        '') ;;
        *) die "usage: $0 [--no-import]" ;;
    esac
    need mmdebstrap umoci tar gcc strip sha256sum dpkg-query
    [[ -x $GO ]] || command -v "$GO" >/dev/null 2>&1 || die "go not found (set GO=/path/to/go)"
    mkdir -p "$OUT" "$CACHE"
    local t0=$SECONDS base
    base=$(ensure_base)
    build_ferrule "$base"
    build_pause
    build_echo
    if [[ -n $import ]]; then
        "$ROOT/test/e2e/cluster.sh" import \
            "$OUT/ferrule.oci.tar=$FERRULE_IMAGE" \
            "$OUT/pause.oci.tar=$PAUSE_IMAGE" \
            "$OUT/echo.oci.tar=$ECHO_IMAGE"
    fi
    log "done in $((SECONDS - t0)) s: $FERRULE_IMAGE $PAUSE_IMAGE $ECHO_IMAGE"
}

main "$@"
