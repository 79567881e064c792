#!/usr/bin/env bash
# Builds ngx_http_ferrule_module.so and ngx_stream_ferrule_module.so against the
# installed NGINX and installs them next to the other dynamic modules, where the
# controller looks for them (--nginx-modules, default /usr/lib/nginx/modules). Idempotent: nothing is rebuilt
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
STREAM_SO=ngx_stream_ferrule_module.so
# Test-only (nginx-module/test/): never loaded by Ferrule, not in the image.
ECHO_SO=ngx_ferrule_token_echo_module.so

[ -f "$SRC/conf_flags" ] || { echo "no $SRC/conf_flags: install nginx-dev" >&2; exit 1; }
# What the installed module was built from: the source and the NGINX it is for.
stamp=$( { cat "$HERE/config" "$HERE"/*.[ch] "$HERE"/test/config "$HERE"/test/*.c; "$NGINX" -V 2>&1; } | sha256sum | cut -d' ' -f1)
if [ -f "$DEST/$SO" ] && [ -f "$DEST/$STREAM_SO" ] && [ -f "$DEST/$ECHO_SO" ] && [ "$(cat "$DEST/$SO.stamp" 2>/dev/null)" = "$stamp" ]; then
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
    # conf_flags leaves out the stream module, which Debian builds as its own
    # package (libnginx-mod-stream) with these flags (nginx -V)
    ./configure "${NGX_CONF_FLAGS[@]}" --with-stream=dynamic --with-stream_ssl_module \
        --with-stream_ssl_preread_module --with-stream_realip_module \
        --add-dynamic-module="$HERE" --add-dynamic-module="$HERE/test" > configure.log 2>&1 ||
        { cat configure.log >&2; exit 1; }
    # only these: nginx-dev has the stream module's headers, not its sources
    make -f objs/Makefile "objs/$SO" "objs/$STREAM_SO" "objs/$ECHO_SO" > make.log 2>&1 || { cat make.log >&2; exit 1; }
)
mkdir -p "$DEST"
# The stream module first: the HTTP one's stamp says both are installed.
for so in "$ECHO_SO" "$STREAM_SO" "$SO"; do
    install -m 0644 "$work/objs/$so" "$DEST/$so.tmp"
    mv "$DEST/$so.tmp" "$DEST/$so"
    echo "installed $DEST/$so" >&2
done
echo "$stamp" > "$DEST/$SO.stamp"
