// leasehold/opentelemetry on the real database, with the SDK's in-memory exporter: runs, skips,
// takeovers, lost leases and fenced transactions become spans with leasehold.* attributes, and
// handlers run inside their run span's context (a span the handler opens is its child).
import { AsyncLocalStorage } from 'node:async_hooks';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError, startWorker, type JobOptions } from '../../src/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { instrument } from '../../src/opentelemetry.js';
import { client, freshDatabase, rawPool, waitFor } from '../support/db.js';

const exporter = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const app = tracerProvider.getTracer('the-application');
const contextManager = new AsyncLocalStorageContextManager().enable();
let url: string;

beforeAll(async () => {
  context.setGlobalContextManager(contextManager);
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  await rawPool(url, 1).query('create table otel_writes (job text, fence bigint)');
});
afterAll(() => {
  context.disable();
});
beforeEach(() => exporter.reset());

const spans = (name: string | RegExp) => exporter.getFinishedSpans().filter((s) => (typeof name === 'string' ? s.name === name : name.test(s.name)));
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;

describe('leasehold/opentelemetry on a worker', () => {
  it('each run is a span with job, slot, fence, holder and outcome; handler spans and fenced transactions nest under it; skips are spans', { timeout: 60_000 }, async () => {
    let failing = 0;
    const jobs: JobOptions[] = [
      {
        name: 'o-run',
        every: '1s',
        ttl: '10s',
        handler: (ctx) =>
          app.startActiveSpan('user work', async (span) => {
            await ctx.transaction((db) => db.query('insert into otel_writes values ($1, $2)', [ctx.job, ctx.fence]));
            span.end();
          }),
      },
      {
        name: 'o-fail',
        every: '1s',
        ttl: '10s',
        handler: async () => {
          failing++;
          throw new Error('the report service said no');
        },
      },
      { name: 'o-slow', every: '1s', ttl: '10s', handler: () => sleep(1_600) },
    ];
    const worker = await startWorker({ connectionString: url, holder: 'otel-worker', jobs, logger: silentLogger(), handleSignals: false });
    const stop = instrument(worker, { tracerProvider });
    try {
      await waitFor(() => spans('leasehold run o-run').length >= 1 && failing >= 1 && spans('leasehold run o-fail').length >= 1 && spans('leasehold skip o-slow').length >= 1, 30_000);
    } finally {
      await worker.stop();
      stop();
    }
    const run = spans('leasehold run o-run')[0]!;
    expect(run.attributes).toMatchObject({ 'leasehold.job': 'o-run', 'leasehold.holder': 'otel-worker', 'leasehold.outcome': 'succeeded' });
    expect(typeof run.attributes['leasehold.fence']).toBe('number');
    expect(new Date(String(run.attributes['leasehold.slot'])).toISOString()).toBe(run.attributes['leasehold.slot']);
    expect(run.status.code).toBe(1); // OK
    expect(parentOf(run)).toBeUndefined(); // a scheduled run starts its own trace

    // the handler ran in the run span's context: its own span is the run's child ...
    const user = spans('user work').find((s) => s.spanContext().traceId === run.spanContext().traceId);
    expect(user, 'the handler span is in the run span\'s trace').toBeDefined();
    expect(parentOf(user!)).toBe(run.spanContext().spanId);
    // ... and the fenced transaction inside it is the handler span's child
    const tx = spans('leasehold transaction o-run').find((s) => parentOf(s) === user!.spanContext().spanId);
    expect(tx).toBeDefined();
    expect(tx!.attributes).toMatchObject({ 'leasehold.lease': 'o-run', 'leasehold.fence': run.attributes['leasehold.fence'], 'leasehold.outcome': 'committed', 'leasehold.holder': 'otel-worker' });
    const written = await rawPool(url, 1).query('select 1 from otel_writes where job = $1 and fence = $2', ['o-run', run.attributes['leasehold.fence']]);
    expect(written.rowCount).toBe(1);

    const failed = spans('leasehold run o-fail')[0]!;
    expect(failed.attributes['leasehold.outcome']).toBe('failed');
    expect(failed.status).toMatchObject({ code: 2, message: expect.stringContaining('the report service said no') });

    const skip = spans('leasehold skip o-slow')[0]!;
    expect(skip.attributes).toMatchObject({ 'leasehold.job': 'o-slow', 'leasehold.outcome': 'skipped', 'leasehold.skip.reason': 'held', 'leasehold.holder': 'otel-worker' });
    expect(typeof skip.attributes['leasehold.fence']).toBe('number');
  });

  it('a takeover is an event on the run span it started; a lost lease an event on its run span, which ends lost', { timeout: 60_000 }, async () => {
    // a holder that never releases, with a short TTL: the worker's first claim takes over
    const stale = await client(url, { liveness: false, holder: 'stale' });
    expect((await stale.acquire('o-take', { ttl: 300 })).acquired).toBe(true);
    await sleep(400);
    let waiting = 0;
    const jobs: JobOptions[] = [
      { name: 'o-take', every: '1s', ttl: '10s', handler: async () => undefined },
      {
        name: 'o-lose',
        every: '1s',
        ttl: '3s',
        handler: async (ctx) => {
          if (++waiting > 1) return;
          await new Promise<void>((resolve) => {
            ctx.signal.addEventListener('abort', () => resolve(), { once: true });
            setTimeout(resolve, 20_000).unref();
          });
        },
      },
    ];
    const worker = await startWorker({ connectionString: url, holder: 'otel-taker', jobs, logger: silentLogger(), handleSignals: false });
    const stop = instrument(worker, { tracerProvider });
    try {
      await waitFor(() => waiting >= 1, 30_000);
      const operator = await client(url, { liveness: false, holder: 'operator' });
      await operator.forceRelease('o-lose');
      await waitFor(() => spans('leasehold run o-take').some((s) => s.attributes['leasehold.took_over'] === true) && spans('leasehold run o-lose').some((s) => s.attributes['leasehold.outcome'] === 'lost'), 30_000);
    } finally {
      await worker.stop();
      stop();
    }
    const taken = spans('leasehold run o-take').find((s) => s.attributes['leasehold.took_over'] === true)!;
    expect(taken.events.find((e) => e.name === 'leasehold.takeover')?.attributes).toMatchObject({ 'leasehold.lease': 'o-take', 'leasehold.holder': 'otel-taker' });
    expect(spans('leasehold takeover o-take')).toEqual([]); // not reported twice
    const lost = spans('leasehold run o-lose').find((s) => s.attributes['leasehold.outcome'] === 'lost')!;
    expect(lost.status.code).toBe(2);
    expect(lost.events.find((e) => e.name === 'leasehold.lease_lost')?.attributes?.['leasehold.lost.reason']).toBeTruthy();
  });
});

describe('leasehold/opentelemetry on a client', () => {
  it('takeover and skip are spans under the caller\'s span; a fenced transaction too, failed ones with an error status', async () => {
    const stale = await client(url, { liveness: false, holder: 'stale-c' });
    expect((await stale.acquire('o-client', { ttl: 300 })).acquired).toBe(true);
    await sleep(400);
    const taker = await client(url, { holder: 'taker-c' });
    const other = await client(url, { holder: 'other-c' });
    const stops = [instrument(taker, { tracerProvider }), instrument(other, { tracerProvider })];
    try {
      await app.startActiveSpan('caller', async (caller) => {
        const got = await taker.acquire('o-client', { ttl: '10s' });
        expect(got.acquired).toBe(true);
        expect((await other.acquire('o-client', { ttl: '10s' })).acquired).toBe(false);
        if (!got.acquired) return;
        await got.lease.transaction((db) => db.query('insert into otel_writes values ($1, $2)', ['o-client', got.lease.fence]));
        await expect(got.lease.transaction((db) => db.query('select * from no_such_table'))).rejects.toThrow();
        await got.lease.release();
        caller.end();
      });
    } finally {
      stops.forEach((stop) => stop());
    }
    const caller = spans('caller')[0]!.spanContext().spanId;
    const takeover = spans('leasehold takeover o-client')[0];
    expect(takeover?.attributes).toMatchObject({ 'leasehold.lease': 'o-client', 'leasehold.holder': 'taker-c', 'leasehold.took_over': true });
    expect(parentOf(takeover!)).toBe(caller);
    const skip = spans('leasehold skip o-client')[0];
    expect(skip?.attributes).toMatchObject({ 'leasehold.lease': 'o-client', 'leasehold.skip.reason': 'held', 'leasehold.holder': 'taker-c', 'leasehold.outcome': 'skipped' });
    expect(parentOf(skip!)).toBe(caller);
    const txs = spans('leasehold transaction o-client');
    expect(txs.map((s) => s.attributes['leasehold.outcome']).sort()).toEqual(['committed', 'failed']);
    expect(txs.every((s) => parentOf(s) === caller)).toBe(true);
    expect(txs.find((s) => s.attributes['leasehold.outcome'] === 'failed')?.status.code).toBe(2);
  });

  it('stops tracing when asked, and refuses unknown options with the closest one named', async () => {
    const c = await client(url, { holder: 'quiet' });
    const stop = instrument(c, { tracerProvider });
    stop();
    const stale = await client(url, { liveness: false, holder: 'stale-q' });
    await stale.acquire('o-quiet', { ttl: 300 });
    await sleep(400);
    await c.acquire('o-quiet', { ttl: '1s' });
    expect(spans(/o-quiet/)).toEqual([]);
    expect(() => instrument(c, { tracerprovider: tracerProvider } as never)).toThrow(InvalidArgumentError);
    expect(() => instrument(c, { tracerprovider: tracerProvider } as never)).toThrow(/did you mean 'tracerProvider'/);
    expect(() => instrument({} as never)).toThrow(InvalidArgumentError);
  });
});

describe('worker.wrapHandlers (the seam instrument() uses)', () => {
  it('runs each handler call inside the wrappers (later ones outside earlier ones) until removed', { timeout: 60_000 }, async () => {
    const store = new AsyncLocalStorage<string[]>();
    const seen: Array<string[] | undefined> = [];
    const order: string[] = [];
    const worker = await startWorker({
      connectionString: url,
      holder: 'wrapped',
      jobs: [{ name: 'o-wrap', every: '1s', ttl: '10s', handler: async () => void seen.push(store.getStore()) }],
      logger: silentLogger(),
      handleSignals: false,
    });
    try {
      const removeInner = worker.wrapHandlers((run, call) => {
        order.push(`inner ${run.job}#${run.fence} attempt ${run.attempt}`);
        return store.run([...(store.getStore() ?? []), 'inner'], call);
      });
      const removeOuter = worker.wrapHandlers((_run, call) => {
        order.push('outer');
        return store.run(['outer'], call);
      });
      await waitFor(() => seen.some((s) => s?.join() === 'outer,inner'), 30_000);
      expect(order.slice(0, 2)).toEqual(['outer', expect.stringMatching(/^inner o-wrap#\d+ attempt 1$/)]);
      removeInner(); // in any order
      removeOuter();
      const before = seen.length;
      await waitFor(() => seen.length > before + 1, 30_000);
      expect(seen.at(-1)).toBeUndefined();
    } finally {
      await worker.stop();
    }
  });
});

describe('zero cost without it', () => {
  it('nothing the main entry imports mentions @opentelemetry', () => {
    const root = fileURLToPath(new URL('../../src/', import.meta.url));
    const seen = new Set<string>();
    const queue = [join(root, 'index.ts')];
    while (queue.length > 0) {
      const file = queue.pop()!;
      if (seen.has(file)) continue;
      seen.add(file);
      const text = readFileSync(file, 'utf8');
      expect(text, file).not.toMatch(/from '@opentelemetry|import\('@opentelemetry|require\('@opentelemetry/);
      for (const [, target] of text.matchAll(/from '(\.[^']+)\.js'/g)) queue.push(join(dirname(file), `${target}.ts`));
    }
    expect(seen.size).toBeGreaterThan(20);
    expect(seen).not.toContain(join(root, 'opentelemetry.ts'));
  });
});
