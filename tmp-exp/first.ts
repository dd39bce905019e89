import { startWorker } from '../src/index.js';
const url = process.env.URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const N = Number(process.env.N ?? 3000);
const firsts: number[] = [];
let acquiredBefore = 0, acquiredAfter = 0;
const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const prefix = process.env.PREFIX ?? `ft${Date.now() % 100000}-`;
const w = await startWorker({ connectionString: url, logger: quiet as any, handleSignals: false, holder: 'ft', claimAhead: process.env.CA ?? 'auto',
  jobs: Array.from({ length: N }, (_, i) => ({ name: `${prefix}${i}`, every: '10s', handler: async (ctx) => { firsts.push(Date.now() - ctx.slot.getTime()); } })) });
w.on('lease:acquired', (e: any) => { if (e.acquiredAt < new Date(Math.ceil(Date.now() / 10000) * 10000 - 5000)) {} });
const start = Date.now();
await new Promise((r) => setTimeout(r, 12000 - (Date.now() % 10000) + 1500 > 15000 ? 11500 : 12000));
firsts.sort((a, b) => a - b);
console.log(`started ${firsts.length}; p50 ${firsts[Math.floor(firsts.length / 2)]} p99 ${firsts[Math.floor(firsts.length * 0.99)]} ms`);
await w.stop();
