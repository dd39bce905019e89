// leasehold/nestjs: NestJS integration. Needs @nestjs/common, @nestjs/core and reflect-metadata
// (optional peer dependencies); the main `leasehold` entry never loads them.
import 'reflect-metadata';
export { LeaseholdModule, type LeaseholdModuleOptions, type LeaseholdModuleAsyncOptions } from './module.js';
export { Leased, LeaseholdJob, type LeasedContext, type LeasedMethodOptions, type LeaseholdJobOptions } from './decorators.js';
export { LeaseContext } from './context.js';
export { LEASEHOLD_CLIENT } from './tokens.js';
export { nestLogger } from './logger.js';
