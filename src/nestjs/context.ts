// The running job's context for code the method calls, without passing it down: inject
// LeaseContext and read `current` (AsyncLocalStorage, so concurrent runs do not mix).
import { Injectable } from '@nestjs/common';
import type { JobContext } from '../job/job.js';
import { contextStorage as storage } from './registry.js';

export class LeaseContext {
  /** The context of the run this code is part of; throws outside a @Leased() or @LeaseholdJob() method. */
  get current(): JobContext {
    const context = storage.getStore();
    if (!context) throw new Error('LeaseContext.current is only available inside a @Leased() or @LeaseholdJob() method run');
    return context;
  }

  /** The current context, or undefined outside a run. */
  get maybe(): JobContext | undefined {
    return storage.getStore();
  }
}
Injectable()(LeaseContext);
