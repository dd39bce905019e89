// The injection token of the module's client.

/** Inject the module's client: `@Inject(LEASEHOLD_CLIENT) leasehold: Leasehold` (or the `Leasehold` class as the token). */
export const LEASEHOLD_CLIENT = 'leasehold:client';
