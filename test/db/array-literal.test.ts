// The array literals the scheduler builds itself must read back as pg's own encoding does.
import { createRequire } from 'node:module';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { numberArrayLiteral, textArrayLiteral, timestampArrayLiteral } from '../../src/db/array-literal.js';

// pg's own encoder of query parameters (what it sent for these arrays before)
const { prepareValue } = createRequire(import.meta.url)('pg/lib/utils.js') as { prepareValue(value: unknown): unknown };

describe('array literals', () => {
  const texts = ['plain', 'with "quotes"', 'back\\slash', 'both \\"', '', 'comma, {brace}', 'NULL', null, 'ünï ☃', ' spaced '];

  it('are what pg itself sends for the same arrays', () => {
    expect(textArrayLiteral(texts)).toBe(prepareValue(texts));
    expect(numberArrayLiteral([1, null, 86_400_000, 31_622_400_000])).toBe('{1,NULL,86400000,31622400000}');
    expect(textArrayLiteral([])).toBe('{}');
    // the joined fast path (nothing to escape, no null) and the per-element one agree with pg
    const plain = ['idle-1', '0 3 * * *', 'ünï ☃', '', 'a,b {c}'];
    expect(textArrayLiteral(plain)).toBe(prepareValue(plain));
    expect(numberArrayLiteral([])).toBe('{}');
    expect(numberArrayLiteral([30_000, 86_400_000])).toBe('{30000,86400000}');
  });

  it('write each distinct instant of a timestamp array once, in UTC, and leave years past 9999 to pg', () => {
    const a = new Date('2026-12-01T20:46:00.000Z');
    expect(timestampArrayLiteral([a, a, new Date(a.getTime()), new Date('2026-12-01T20:46:00.123Z')])).toBe(
      '{2026-12-01T20:46:00.000Z,2026-12-01T20:46:00.000Z,2026-12-01T20:46:00.000Z,2026-12-01T20:46:00.123Z}',
    );
    expect(timestampArrayLiteral([])).toBe('{}');
    const far = [a, new Date('+010000-01-01T00:00:00.000Z')];
    expect(timestampArrayLiteral(far)).toBe(far);
    const invalid = [new Date(Number.NaN)];
    expect(timestampArrayLiteral(invalid)).toBe(invalid);
  });

  describe('against the server', () => {
    const client = new pg.Client({ connectionString: inject('serverUrl') }) // the suite's server, embedded or DATABASE_URL;
    beforeAll(() => client.connect());
    afterAll(() => client.end());

    it('read back element for element', async () => {
      const { rows } = await client.query<{ t: Array<string | null>; n: string[] }>('select $1::text[] as t, $2::bigint[]::text[] as n', [
        textArrayLiteral(texts),
        numberArrayLiteral([1, null, 31_622_400_000]),
      ]);
      expect(rows[0]?.t).toEqual(texts);
      expect(rows[0]?.n).toEqual(['1', null, '31622400000']);
    });

    it('timestamps read back as the same instants whatever the session time zone', async () => {
      const instants = ['2026-12-01T20:46:00.000Z', '2026-03-29T01:30:00.500Z', '0001-01-01T00:00:00.000Z', '9999-12-31T23:59:59.999Z'].map((t) => new Date(t));
      await client.query(`set timezone = 'Asia/Kathmandu'`);
      try {
        const literal = timestampArrayLiteral(instants);
        expect(typeof literal).toBe('string');
        const { rows } = await client.query<{ ms: string[] }>(`select array(select (extract(epoch from t) * 1000)::bigint::text from unnest($1::timestamptz[]) t) as ms`, [literal]);
        expect(rows[0]?.ms.map(Number)).toEqual(instants.map((d) => d.getTime()));
      } finally {
        await client.query('reset timezone');
      }
    });
  });
});
