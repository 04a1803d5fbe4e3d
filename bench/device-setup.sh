#!/usr/bin/env bash
# On the GPU machine (Ubuntu 24.04, nothing downloadable): unpack the carried Debian packages
# (.deb/: libucx-dev, libconfig, cJSON) into a private prefix and point pkg-config at it.
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
ucx_lib=$(ls /usr/lib/x86_64-linux-gnu/libucp.so.0 2>/dev/null || true)
libdir=$DEPS/usr/lib/x86_64-linux-gnu
for l in ucp uct ucs ucm; do
    [ -e "$libdir/lib$l.so" ] || ln -sf "/usr/lib/x86_64-linux-gnu/lib$l.so.0" "$libdir/lib$l.so"
done
export PKG_CONFIG_PATH=$libdir/pkgconfig:$DEPS/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}
export LD_LIBRARY_PATH=$libdir:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
set +e
