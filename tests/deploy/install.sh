#!/usr/bin/env bash
# Installs the Helm renderer that tests/deploy/test_helm_chart.py uses, exactly as
# renderer.lock pins it (hash-checked, a prebuilt manylinux wheel), into
# tests/deploy/.renderer (nothing global). It is Helm's Go SDK as a shared library: no helm
# binary, no download outside the package registry.
#
# Idempotent: when .renderer already holds this lock file's install, it does nothing.
set -euo pipefail
cd "$(dirname "$0")"

target=.renderer
stamp=$target/.crank-installed-lock
if cmp -s renderer.lock "$stamp" 2>/dev/null; then
    exit 0
fi
rm -rf "$target"
"${PYTHON:-python3}" -m pip install --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: --require-hashes --target "$target" -r renderer.lock
cp renderer.lock "$stamp"
echo "tests/deploy/install.sh: installed the Helm renderer ($(grep -o '^helm-python-sdk==[^ ]*' renderer.lock))"
