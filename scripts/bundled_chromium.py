"""Whether Playwright's own Chromium is installed, for `make setup` (scripts/setup.sh): exits 0 if it is, 1 if
Playwright has none downloaded (setup then takes a system Chromium or Debian's package)."""
import os
import sys

from playwright.sync_api import sync_playwright

with sync_playwright() as p:
    sys.exit(0 if os.path.exists(p.chromium.executable_path) else 1)
