#!/usr/bin/env bash
# Builds ngx_http_ferrule_module.so against the installed NGINX and installs it
# next to the other dynamic modules, where the controller looks for it
# (--nginx-modules, default /usr/lib/nginx/modules). Idempotent: nothing is rebuilt
# while the source and the NGINX binary are those of the last build.
#
#   nginx-module/build.sh [MODULES_DIR]
#
# Needs Debian's nginx-dev (headers and configure flags of the packaged NGINX, so
# the module is binary compatible with it), gcc, make and the libraries NGINX's
# configure checks for (PCRE2, OpenSSL, zlib): `make deps` installs them.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEST=${1:-/usr/lib/nginx/modules}
SRC=/usr/share/nginx/src
NGINX=${NGINX:-nginx}
SO=ngx_http_ferrule_module.so

[ -f "$SRC/conf_flags" ] || { echo "no $SRC/conf_flags: install nginx-dev" >&2; exit 1; }
# What the installed module was built from: the source and the NGINX it is for.
stamp=$( { cat "$HERE/config" "$HERE"/*.[ch]; "$NGINX" -V 2>&1; } | sha256sum | cut -d' ' -f1)
if [ -f "$DEST/$SO" ] && [ "$(cat "$DEST/$SO.stamp" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$SRC/." "$work/"
# shellcheck disable=SC1091
. "$SRC/conf_flags" # NGX_CONF_FLAGS: the packaged NGINX's configure arguments
echo "building $SO for $("$NGINX" -v 2>&1)" >&2
(
    cd "$work"
    ./configure "${NGX_CONF_FLAGS[@]}" --add-dynamic-module="$HERE" > configure.log 2>&1 ||
        { cat configure.log >&2; exit 1; }
    make -f objs/Makefile modules > make.log 2>&1 || { cat make.log >&2; exit 1; }
)
mkdir -p "$DEST"
install -m 0644 "$work/objs/$SO" "$DEST/$SO.tmp"
mv "$DEST/$SO.tmp" "$DEST/$SO"
echo "$stamp" > "$DEST/$SO.stamp"
echo "installed $DEST/$SO" >&2
