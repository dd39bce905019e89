// The package entry's startDashboard: the dashboard (its page, script and queries) loads on the
// first call, so a worker or client that never serves one does not carry it in memory.
import type { Dashboard, DashboardOptions } from './server.js';

/** Serves the dashboard (docs/dashboard.md) until `close()`. */
export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  const server = await import('./server.js');
  return server.startDashboard(options);
}
