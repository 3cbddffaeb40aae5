#!/usr/bin/env sh
# Installs libferry, its headers and ferry.pc under PREFIX (default /usr/local):
#   cargo build --release -p ferry-c && crates/ferry-c/install.sh [PREFIX]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
prefix=${1:-/usr/local}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
cp "$root/target/release/libferry.so" "$root/target/release/libferry.a" "$prefix/lib/"
cp "$here/include/ferry.h" "$here/include/laik.h" "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$here/ferry.pc.in" > "$prefix/lib/pkgconfig/ferry.pc"
echo "installed libferry $version under $prefix (pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig)"
