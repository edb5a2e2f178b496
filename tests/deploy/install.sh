#!/usr/bin/env bash
# Installs the tools tests/deploy runs, nothing global:
#
# - the Helm renderer, exactly as renderer.lock pins it (hash-checked, a prebuilt manylinux
#   wheel), into tests/deploy/.renderer: Helm's Go SDK as a shared library, no helm binary;
# - Debian's nginx, unpacked (not installed: no service starts) into tests/deploy/.nginx,
#   for the test that runs deploy/nginx.conf in front of a real gateway. Without apt it
#   says so and that test skips.
#
# Idempotent: what is already there is left alone.
set -euo pipefail
cd "$(dirname "$0")"

renderer=.renderer
if ! cmp -s renderer.lock "$renderer/.crank-installed-lock" 2>/dev/null; then
    rm -rf "$renderer"
    "${PYTHON:-python3}" -m pip install --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --require-hashes --target "$renderer" -r renderer.lock
    cp renderer.lock "$renderer/.crank-installed-lock"
    echo "tests/deploy/install.sh: installed the Helm renderer ($(grep -o '^helm-python-sdk==[^ ]*' renderer.lock))"
fi

nginx=.nginx
if [ ! -x "$nginx/usr/sbin/nginx" ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "tests/deploy/install.sh: no apt-get; the nginx proxy test will skip" >&2
        exit 0
    fi
    download=$(mktemp -d)
    trap 'rm -rf "$download"' EXIT
    # A fresh machine may not have the package lists yet (updating them needs root).
    if ! (cd "$download" && apt-get download nginx >/dev/null 2>&1); then
        apt-get update -qq >/dev/null 2>&1 || true
        if ! (cd "$download" && apt-get download nginx >/dev/null 2>&1); then
            echo "tests/deploy/install.sh: apt-get download nginx failed; the nginx proxy test will skip" >&2
            exit 0
        fi
    fi
    rm -rf "$nginx"
    dpkg-deb -x "$download"/nginx_*.deb "$nginx"
    echo "tests/deploy/install.sh: unpacked $("$nginx/usr/sbin/nginx" -v 2>&1)"
fi
