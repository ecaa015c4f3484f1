#!/bin/sh
# Installs or upgrades edgeferry from the release .tar.gz (`npm run package`) on a systemd machine without dpkg:
#   tar xzf edgeferry-<version>-linux-x64.tar.gz && sudo edgeferry-<version>-linux-x64/install.sh
# Offline: the tree next to this script holds everything, Node.js 24 included. It puts the same files in the same
# places as the .deb (docs/operations.md "Installed files, upgrade and removal"):
#   code:   /opt/edgeferry           (replaced on every run: this is the upgrade path)
#   config: /etc/edgeferry/edgeferry.yaml   (created once; never overwritten)
#   data:   /var/lib/edgeferry       (systemd StateDirectory: LMDB store, OPC UA PKI; never touched here)
#   /etc/systemd/system/edgeferry.service, /usr/bin/edgeferry, bash completion
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tree="$here/root"
prefix=/opt/edgeferry

[ "$(id -u)" -eq 0 ] || { echo "install.sh: run as root" >&2; exit 1; }
[ -x "$tree$prefix/node/bin/node" ] || { echo "install.sh: $tree$prefix is missing: run me from the unpacked release" >&2; exit 1; }

upgrade=
[ -d "$prefix" ] && upgrade=yes
# Stopped before its files change (see postinst); started again by postinst.
if [ -d /run/systemd/system ]; then systemctl stop edgeferry.service 2>/dev/null || true; fi

# Stage the new version next to the old one, then swap, so a failed copy never leaves a half-installed tree.
rm -rf "$prefix.new" "$prefix.old"
cp -a "$tree$prefix" "$prefix.new"
[ -d "$prefix" ] && mv "$prefix" "$prefix.old"
mv "$prefix.new" "$prefix"
rm -rf "$prefix.old"

install -d -m 0755 /etc/edgeferry
[ -f /etc/edgeferry/edgeferry.yaml ] || cp "$tree/etc/edgeferry/edgeferry.yaml" /etc/edgeferry/edgeferry.yaml
install -m 0644 "$tree/lib/systemd/system/edgeferry.service" /etc/systemd/system/edgeferry.service
install -m 0755 "$tree/usr/bin/edgeferry" /usr/bin/edgeferry
if [ -d /usr/share/bash-completion/completions ]; then
  install -m 0644 "$tree/usr/share/bash-completion/completions/edgeferry" /usr/share/bash-completion/completions/edgeferry
fi

sh "$here/postinst" configure "$upgrade"
echo "edgeferry $("$prefix/node/bin/node" -p 'require("/opt/edgeferry/package.json").version') installed in $prefix;" \
  "config /etc/edgeferry/edgeferry.yaml; data /var/lib/edgeferry"
