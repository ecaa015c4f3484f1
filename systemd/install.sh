#!/bin/sh
# Installs or upgrades edgeferry as a systemd service. Run as root from a built checkout (npm ci && npm run build).
#   code:   /opt/edgeferry            (replaced on every run: this is the upgrade path)
#   config: /etc/edgeferry/edgeferry.yaml  (created once from config/edgeferry.yaml; never overwritten)
#   data:   /var/lib/edgeferry        (systemd StateDirectory: LMDB store, OPC UA PKI; never touched here)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=/opt/edgeferry

[ "$(id -u)" -eq 0 ] || { echo "install.sh: run as root" >&2; exit 1; }
[ -f "$here/dist/src/cli.js" ] || { echo "install.sh: build first (npm ci && npm run build)" >&2; exit 1; }

id edgeferry >/dev/null 2>&1 || useradd --system --home-dir /var/lib/edgeferry --shell /usr/sbin/nologin edgeferry

# Stage the new version next to the old one, then swap, so a failed copy never leaves a half-installed tree.
rm -rf "$prefix.new"
mkdir -p "$prefix.new"
cp -a "$here/dist" "$here/config" "$here/systemd" "$here/package.json" "$here/package-lock.json" "$here/README.md" "$prefix.new/"
(cd "$prefix.new" && npm ci --omit=dev --no-audit --no-fund >/dev/null)
rm -rf "$prefix.old"
[ -d "$prefix" ] && mv "$prefix" "$prefix.old"
mv "$prefix.new" "$prefix"

install -d -m 0750 -o root -g edgeferry /etc/edgeferry
if [ ! -f /etc/edgeferry/edgeferry.yaml ]; then
  sed 's#^\(\s*path:\s*\).*data.*#\1/var/lib/edgeferry#' "$here/config/edgeferry.yaml" > /etc/edgeferry/edgeferry.yaml
  chmod 0640 /etc/edgeferry/edgeferry.yaml
  chgrp edgeferry /etc/edgeferry/edgeferry.yaml
fi

install -m 0644 "$here/systemd/edgeferry.service" /etc/systemd/system/edgeferry.service
systemctl daemon-reload
systemctl enable edgeferry.service
systemctl restart edgeferry.service
echo "edgeferry installed in $prefix; config /etc/edgeferry/edgeferry.yaml; data /var/lib/edgeferry"
