// `leasehold/dashboard`: the dashboard, served from your process (docs/dashboard.md): read-only,
// or with actions for the people it knows (docs/dashboard.md, "Actions").
export { startDashboard, type Dashboard, type DashboardOptions, type MetricsSource } from './server.js';
export type { DashboardActionsOptions, DashboardProxyOptions } from './action-options.js';
export { hashPassword, type DashboardUser } from './passwords.js';
