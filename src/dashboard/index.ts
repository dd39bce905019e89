// `leasehold/dashboard`: the read-only dashboard, served from your process (docs/dashboard.md).
export { startDashboard, type Dashboard, type DashboardOptions, type MetricsSource } from './server.js';
