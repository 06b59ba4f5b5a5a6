#!/bin/sh
# Slims a runtime stage that a Dockerfile then copies whole into `FROM scratch` (so what is deleted here
# is really gone from the image, not hidden under a later layer). Usage, as the last step of the stage:
#   sh slim-runtime.sh [EXTRA_PACKAGES_REGEX] [PATH...]
# Deletes the package tooling (apt, perl, gpgv: the images are rebuilt, never upgraded in place), the
# packages matching EXTRA_PACKAGES_REGEX (an ERE over package names), then documentation, caches and PATHs.
set -eu
extra="${1:-}"
[ "$#" -gt 0 ] && shift
tooling='apt|libapt-pkg[0-9.]*|gpgv|debian-archive-keyring|e2fsprogs|libext2fs2|logsave|openssl'
pkgs=$(dpkg-query -Wf '${Package}\n' | grep -E "^(${tooling}${extra:+|$extra})$" || true)
# Their files go, without maintainer scripts (which would need the tools that go with them); the
# dependencies of what stays were checked when it was installed. Directories stay.
# shellcheck disable=SC2086
for p in $pkgs perl-base debconf; do dpkg-query -L "$p"; done | sort -u | while read -r f; do
    # (Not directories, nor links to them: /lib64 and the like are links in a merged /usr.)
    if [ ! -d "$f" ] && { [ -f "$f" ] || [ -L "$f" ]; }; then rm -f "$f"; fi
done
rm -rf /var/lib/dpkg /etc/dpkg /usr/bin/dpkg* /usr/share/dpkg /var/lib/apt /var/cache/* /var/log/* \
    /usr/share/doc /usr/share/man /usr/share/info /usr/share/locale /usr/share/lintian /usr/share/bug \
    /tmp/* "$@"
echo "slim-runtime: purged $(($(echo "$pkgs" | wc -w) + 2)) packages; /usr is $(du -sh /usr | cut -f1)"
