// leasehold/opentelemetry: traces of a worker's or a client's leases, for applications that use
// OpenTelemetry. Opt in by importing this entry (it needs @opentelemetry/api, an optional peer
// dependency); the main entry never imports OpenTelemetry. It subscribes to the events
// (observe/events.ts) and wraps handler calls so that spans the handler opens nest under its run.
import { context, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span, type Tracer, type TracerProvider } from '@opentelemetry/api';
import { InvalidArgumentError } from './errors.js';
import type { LeaseholdEvents } from './observe/events.js';
import { checkOptionKeys, optionKeys } from './validate/options.js';
import type { Worker } from './worker/worker.js';

export interface InstrumentOptions {
  /** Tracer provider. @default the global one (trace.getTracerProvider()) */
  tracerProvider?: TracerProvider | undefined;
}

/** A client (createLeasehold) or a worker (startWorker). */
export interface Instrumentable {
  on<E extends keyof LeaseholdEvents>(event: E, listener: (...args: LeaseholdEvents[E]) => void): () => void;
}

const TRACER_NAME = 'leasehold';
const OPTION_KEYS = optionKeys<InstrumentOptions>({ tracerProvider: true });

/**
 * Traces `source` (a worker or a client):
 *
 * - every scheduled run is a span `leasehold run <job>` from start to recorded outcome; the
 *   handler runs inside its context, so spans it opens are its children;
 * - every skip is a span `leasehold skip <job|lease>` (zero length), every takeover an event on
 *   the run span it started (or a span `leasehold takeover <lease>` outside a run);
 * - every fenced transaction is a span `leasehold transaction <lease>` under the active span;
 * - a lost lease is an event on its run span.
 *
 * Attributes: `leasehold.job`, `leasehold.lease`, `leasehold.slot` (ISO 8601), `leasehold.fence`,
 * `leasehold.holder`, `leasehold.outcome`, and per kind `leasehold.skip.*`,
 * `leasehold.lost.reason`, `leasehold.took_over`. Returns a function that stops tracing.
 */
export function instrument(source: Worker | Instrumentable, options: InstrumentOptions = {}): () => void {
  if (typeof source?.on !== 'function') throw new InvalidArgumentError('source', 'instrument(source) takes a worker (startWorker) or a client (createLeasehold).');
  checkOptionKeys(options, OPTION_KEYS, 'instrument()');
  const tracer: Tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer(TRACER_NAME);
  const runs = new Map<string, Span>();
  const pendingTakeovers = new Map<string, { attributes: Attributes; parent: Context }>();
  const key = (name: string, fence: number) => `${name}#${fence}`;

  const stops = [
    source.on('run:started', (run) => {
      const attributes: Attributes = {
        'leasehold.job': run.job,
        'leasehold.lease': run.job,
        'leasehold.slot': run.slot.toISOString(),
        'leasehold.fence': run.fence,
        'leasehold.holder': run.holder,
      };
      // a scheduled run starts a trace of its own: nothing upstream caused it
      const span = tracer.startSpan(`leasehold run ${run.job}`, { kind: SpanKind.INTERNAL, attributes }, ROOT_CONTEXT);
      const id = key(run.job, run.fence);
      const takeover = pendingTakeovers.get(id);
      if (takeover) {
        pendingTakeovers.delete(id);
        span.setAttribute('leasehold.took_over', true);
        span.addEvent('leasehold.takeover', takeover.attributes);
      }
      runs.set(id, span);
    }),
    source.on('run:finished', (run) => {
      const id = key(run.job, run.fence);
      const span = runs.get(id);
      if (!span) return;
      runs.delete(id);
      span.setAttribute('leasehold.outcome', run.outcome);
      if (run.outcome === 'succeeded') span.setStatus({ code: SpanStatusCode.OK });
      else if (run.outcome === 'failed' || run.outcome === 'lost' || run.outcome === 'timed-out') span.setStatus({ code: SpanStatusCode.ERROR, message: run.error ?? run.outcome });
      span.end();
    }),
    source.on('slot:skipped', (skip) => {
      zeroSpan(tracer, `leasehold skip ${skip.job}`, {
        'leasehold.job': skip.job,
        'leasehold.lease': skip.job,
        'leasehold.slot': skip.slot.toISOString(),
        'leasehold.outcome': 'skipped',
        'leasehold.skip.reason': 'held',
        'leasehold.skip.buffered': skip.buffered,
        ...(skip.holder === null ? {} : { 'leasehold.holder': skip.holder }),
        'leasehold.fence': skip.holderFence,
        ...(skip.holderSlot ? { 'leasehold.skip.holder_slot': skip.holderSlot.toISOString() } : {}),
        ...(skip.heldMs === null ? {} : { 'leasehold.skip.held_ms': skip.heldMs }),
      });
    }),
    source.on('lease:skipped', (skip) => {
      zeroSpan(tracer, `leasehold skip ${skip.name}`, {
        'leasehold.lease': skip.name,
        'leasehold.outcome': 'skipped',
        'leasehold.skip.reason': skip.reason,
        'leasehold.fence': skip.fence,
        ...(skip.holder === null ? {} : { 'leasehold.holder': skip.holder }),
      });
    }),
    source.on('lease:acquired', (lease) => {
      if (!lease.tookOver) return;
      const attributes: Attributes = {
        'leasehold.lease': lease.name,
        'leasehold.fence': lease.fence,
        'leasehold.holder': lease.holder,
        ...(lease.slot ? { 'leasehold.slot': lease.slot.toISOString() } : {}),
      };
      // A worker's run starts right after its lease is adopted (same turn of the event loop):
      // then the takeover is an event on the run span; otherwise it gets a span of its own.
      const id = key(lease.name, lease.fence);
      pendingTakeovers.set(id, { attributes, parent: context.active() });
      queueMicrotask(() => {
        const pending = pendingTakeovers.get(id);
        if (!pending) return;
        pendingTakeovers.delete(id);
        zeroSpan(tracer, `leasehold takeover ${lease.name}`, { ...pending.attributes, 'leasehold.took_over': true }, pending.parent);
      });
    }),
    source.on('lease:lost', (lease, error) => {
      runs.get(key(lease.name, lease.fence))?.addEvent('leasehold.lease_lost', { 'leasehold.lost.reason': error.reason, 'leasehold.fence': lease.fence });
    }),
    source.on('transaction:finished', (tx) => {
      // emitted in the caller's async context: the span nests under the caller's active span
      const end = Date.now();
      const span = tracer.startSpan(`leasehold transaction ${tx.name}`, {
        kind: SpanKind.CLIENT,
        startTime: end - tx.durationMs,
        attributes: {
          'leasehold.lease': tx.name,
          'leasehold.fence': tx.fence,
          'leasehold.holder': tx.holder,
          'leasehold.outcome': tx.outcome,
          ...(tx.slot ? { 'leasehold.slot': tx.slot.toISOString() } : {}),
          'db.system': 'postgresql',
        },
      });
      if (tx.outcome === 'failed') span.setStatus({ code: SpanStatusCode.ERROR, message: tx.error ?? 'failed' });
      span.end(end);
    }),
  ];
  // Handlers run inside their run span's context (workers only: clients have no handlers).
  if (isWorker(source)) {
    stops.push(
      source.wrapHandlers((run, call) => {
        const span = runs.get(key(run.job, run.fence));
        return span ? context.with(trace.setSpan(context.active(), span), call) : call();
      }),
    );
  }
  return () => {
    for (const stop of stops) stop();
    for (const span of runs.values()) span.end();
    runs.clear();
  };
}

function zeroSpan(tracer: Tracer, name: string, attributes: Attributes, parent: Context = context.active()): void {
  const now = Date.now();
  tracer.startSpan(name, { kind: SpanKind.INTERNAL, startTime: now, attributes }, parent).end(now);
}

function isWorker(source: Worker | Instrumentable): source is Worker {
  return typeof (source as Worker).wrapHandlers === 'function';
}
