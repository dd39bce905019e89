// Debian's Chromium driven by playwright-core, for the dashboard's browser tests. The flags keep
// it off the network this machine does not have (background services, QUIC, component updates).
import { existsSync } from 'node:fs';
import type { Browser } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';
export const haveChromium = existsSync(CHROMIUM);
export const NO_CHROMIUM = `SKIPPED: needs Debian's chromium at ${CHROMIUM} (apt-get install chromium); .ci/run installs it`;

export async function launchChromium(): Promise<Browser> {
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    timeout: 15_000,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}
