#!/usr/bin/env bash
# Usage: .ci/test-rootfs.sh KIND DIR — lay out the root filesystem of a test image in DIR (empty or
# missing), from this machine's own files: nothing is pulled.
#   busybox  busybox-static and its applets: the image most tests use (no C library at all)
#   glibc    the same, plus this machine's glibc loader and libraries, libstdc++, libgcc_s and bash:
#            the smallest image that runs the agents' programs that need a glibc userland (Claude
#            Code's, opencode's, Node's), for the installed-agent tests
set -euo pipefail
kind=$1
root=$2
mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/workspace"
chmod 1777 "$root/tmp"
cp /bin/busybox "$root/bin/"
for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
done
[ "$kind" = busybox ] && exit 0
[ "$kind" = glibc ] || { echo "test-rootfs.sh: unknown kind $kind (busybox or glibc)" >&2; exit 2; }
arch_lib=/lib/x86_64-linux-gnu
mkdir -p "$root$arch_lib" "$root/lib64" "$root/usr/bin"
# the loader and every library bash and the agents' programs load, copied as files (no links out)
for lib in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 \
        libstdc++.so.6 libgcc_s.so.1 libtinfo.so.6 libutil.so.1 libresolv.so.2; do
    if [ -e "$arch_lib/$lib" ]; then cp -L "$arch_lib/$lib" "$root$arch_lib/$lib"; fi
done
ln -sf "$arch_lib/ld-linux-x86-64.so.2" "$root/lib64/ld-linux-x86-64.so.2"
rm -f "$root/bin/bash"
cp -L /bin/bash "$root/bin/bash"
ln -sf /bin/bash "$root/usr/bin/bash"
ln -sf /bin/env "$root/usr/bin/env"
printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
mkdir -p "$root/root"
