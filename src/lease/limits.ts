// Bounds shared by the client and the SQL functions (leasehold.check_ttl, check_name).
export const MIN_TTL_MS = 100;
export const MAX_TTL_MS = 7 * 24 * 60 * 60 * 1000;
