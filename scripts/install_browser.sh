#!/usr/bin/env bash
# Install Debian's Chromium for the browser end-to-end test (tests/e2e), never a downloaded browser.
#
#   scripts/install_browser.sh        # installs /usr/bin/chromium with apt-get when it is missing
#
# Harmless when Chromium is already there. Needs root or password-less sudo and apt-get; exits 1 with a
# one-line reason otherwise (tests/e2e then skips, or fails when CI is set).
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    echo "install_browser: $CHROMIUM is present"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_browser: $CHROMIUM is missing and apt-get is not available on this machine" >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=(env)
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n env)
else
    echo "install_browser: $CHROMIUM is missing; installing it needs root or password-less sudo" >&2
    exit 1
fi

# fonts-dejavu-core: so that text in the screenshots renders on minimal images without any font.
"${as_root[@]}" DEBIAN_FRONTEND=noninteractive apt-get update
"${as_root[@]}" DEBIAN_FRONTEND=noninteractive apt-get install -y chromium fonts-dejavu-core

if [ ! -x "$CHROMIUM" ]; then
    echo "install_browser: apt-get finished but $CHROMIUM is still missing" >&2
    exit 1
fi
echo "install_browser: installed $CHROMIUM"
