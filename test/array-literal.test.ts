// The array literals the scheduler builds itself must read back as pg's own encoding does.
import { createRequire } from 'node:module';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { integerArrayLiteral, textArrayLiteral } from '../src/db/array-literal.js';

// pg's own encoder of query parameters (what it sent for these arrays before)
const { prepareValue } = createRequire(import.meta.url)('pg/lib/utils.js') as { prepareValue(value: unknown): unknown };

describe('array literals', () => {
  const texts = ['plain', 'with "quotes"', 'back\\slash', 'both \\"', '', 'comma, {brace}', 'NULL', null, 'ünï ☃', ' spaced '];

  it('are what pg itself sends for the same arrays', () => {
    expect(textArrayLiteral(texts)).toBe(prepareValue(texts));
    expect(integerArrayLiteral([1, null, 86_400_000, 31_622_400_000])).toBe('{1,NULL,86400000,31622400000}');
    expect(textArrayLiteral([])).toBe('{}');
    // the joined fast path (nothing to escape, no null) and the per-element one agree with pg
    const plain = ['idle-1', '0 3 * * *', 'ünï ☃', '', 'a,b {c}'];
    expect(textArrayLiteral(plain)).toBe(prepareValue(plain));
    expect(integerArrayLiteral([])).toBe('{}');
    expect(integerArrayLiteral([30_000, 86_400_000])).toBe('{30000,86400000}');
  });

  describe('against the server', () => {
    const client = new pg.Client({ connectionString: inject('serverUrl') }) // the suite's server, embedded or DATABASE_URL;
    beforeAll(() => client.connect());
    afterAll(() => client.end());

    it('read back element for element', async () => {
      const { rows } = await client.query<{ t: Array<string | null>; n: string[] }>('select $1::text[] as t, $2::bigint[]::text[] as n', [
        textArrayLiteral(texts),
        integerArrayLiteral([1, null, 31_622_400_000]),
      ]);
      expect(rows[0]?.t).toEqual(texts);
      expect(rows[0]?.n).toEqual(['1', null, '31622400000']);
    });
  });
});
