#!/usr/bin/env bash
# Browser test: a page on another origin runs Exec against a real daemon over Connect and gRPC-Web with
# @connectrpc/connect-web, in headless Debian Chromium driven by playwright-core (test/side/browser/run.ts).
# Installs Debian's chromium with apt-get when missing; playwright-core downloads no browser.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/side/lib/steps.sh
report_failed_step
source test/side/lib/apt.sh
apt_install chromium
/usr/bin/chromium --version 2>/dev/null
node --import tsx test/side/browser/run.ts
