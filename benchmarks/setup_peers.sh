#!/usr/bin/env bash
# Installs the peer MCP servers that benchmarks/bash_mcp.py measures next to ours, into benchmarks/.peers/
# (gitignored). Idempotent: a peer already installed at the pinned version is left alone.
#
#   desktop-commander  npm @wonderwhy-er/desktop-commander, run with node (PUPPETEER_SKIP_DOWNLOAD: its
#                      puppeteer dependency would otherwise download Chrome at install time)
#   mcp-shell-server   PyPI mcp-shell-server, in its own venv (it may pin another mcp than ours)
set -euo pipefail

DC_VERSION="${DC_VERSION:-0.2.52}"
SHELL_SERVER_VERSION="${SHELL_SERVER_VERSION:-1.1.14}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
peers="$here/.peers"
mkdir -p "$peers"

dc_pkg="$peers/node_modules/@wonderwhy-er/desktop-commander/package.json"
if [[ -f "$dc_pkg" ]] && grep -q "\"version\": \"$DC_VERSION\"" "$dc_pkg"; then
    echo "desktop-commander $DC_VERSION: already installed"
else
    echo "desktop-commander $DC_VERSION: installing into $peers"
    # npm does not run the package's install scripts (its postinstall only reports the install to its
    # telemetry endpoint and checks ripgrep; the benchmark needs neither).
    PUPPETEER_SKIP_DOWNLOAD=1 npm install --prefix "$peers" --no-audit --no-fund --ignore-scripts \
        "@wonderwhy-er/desktop-commander@$DC_VERSION"
fi

venv="$peers/venv"
if [[ -x "$venv/bin/mcp-shell-server" ]] \
    && "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp-shell-server') != '$SHELL_SERVER_VERSION')"; then
    echo "mcp-shell-server $SHELL_SERVER_VERSION: already installed"
else
    echo "mcp-shell-server $SHELL_SERVER_VERSION: installing into $venv"
    [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp-shell-server==$SHELL_SERVER_VERSION"
fi
