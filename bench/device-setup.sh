#!/usr/bin/env bash
# On the GPU machine (Ubuntu 24.04, nothing downloadable): unpack the carried Debian packages
# (.deb/: libucx-dev, libconfig, cJSON, PCRE2, xxHash headers and xxhsum, liburing) into a private prefix
# and point pkg-config at it.
# Fetch them on the Debian dev machine first (the folder is carried to the device machine):
#   mkdir -p .deb && cd .deb && apt-get download libucx-dev libconfig-dev libconfig9 libcjson-dev libcjson1 libpcre2-dev \
#       libxxhash-dev libxxhash0 xxhash liburing-dev liburing2
# Source it: `source bench/device-setup.sh`.
set -e
DEPS=${DEPS:-/tmp/mt-deps}
mkdir -p "$DEPS"
for f in .deb/*.deb; do dpkg -x "$f" "$DEPS"; done
# The .pc files say prefix=/usr; make them point into the private prefix. UCX's libraries
# themselves are the machine's (runtime only), the headers ours.
for pc in $(find "$DEPS" -name '*.pc'); do
    sed -i -E "s#^(prefix|libdir|includedir) *= */usr#\1=$DEPS/usr#" "$pc"
done
libdir=$DEPS/usr/lib/x86_64-linux-gnu
sysdir=/usr/lib/x86_64-linux-gnu
for l in ucp uct ucs ucm; do
    [ -e "$libdir/lib$l.so" ] || ln -sf "$sysdir/lib$l.so.0" "$libdir/lib$l.so"
done
# A -dev package's libX.so points at the runtime package's libX.so.N.M, which the machine has
# at its own version: point each dangling link at the machine's library.
for link in "$libdir"/*.so; do
    [ -e "$link" ] && continue
    real=$(ls "$sysdir/$(basename "$link")".* 2>/dev/null | head -n 1)
    [ -n "$real" ] && ln -sf "$real" "$link"
done
export PKG_CONFIG_PATH=$libdir/pkgconfig:$DEPS/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}
export LD_LIBRARY_PATH=$libdir:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$DEPS/usr/bin:$PATH # xxhsum for e2e_ckpt_verify
set +e
