// leased() reports a skip and missed slots as events; the client's event logger writes each
// once. (They were logged twice: once as the event, once by leased() itself, doubling
// log-derived counts and alerts.)
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import { leased, type Logger } from '../../src/index.js';
import { client, freshDatabase } from '../support/db.js';

let url: string;

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
});

function capturingLogger(): { logger: Logger; events: string[] } {
  const events: string[] = [];
  const keep = (fields: object) => {
    const event = (fields as { event?: unknown }).event;
    if (typeof event === 'string') events.push(event);
  };
  return { logger: { debug: keep, info: keep, warn: keep, error: keep, isLevelEnabled: () => true }, events };
}

describe('leased() logs', () => {
  it('a skip once, and missed slots once', async () => {
    const holder = await client(url, { holder: 'first' });
    const { logger, events } = capturingLogger();
    const second = await client(url, { holder: 'second', logger });
    let release!: () => void;
    const busy = new Promise<void>((resolve) => (release = resolve));
    const options = { name: 'log-once', every: '1s', ttl: '10s' } as const;
    const running = leased(holder, options, async () => busy)();
    await sleep(1_100); // the next slot, while the first run still holds the lease
    const skipped = await leased(second, options, async () => undefined)();
    expect(skipped).toMatchObject({ ran: false, reason: 'held', holder: 'first', skipRecorded: true });
    expect(events.filter((e) => e === 'slot:skipped')).toHaveLength(1);
    release();
    await running;

    // the second replica's next call comes 3 s later: the slots in between were missed
    const guard = leased(second, options, async () => undefined);
    await guard();
    await sleep(3_100);
    await guard();
    expect(events.filter((e) => e === 'slot:missed')).toHaveLength(1);
  }, 30_000);
});
