// The first page of the job table rendered on the server, so the page is useful at first paint
// and without JavaScript. Mirrors the script's table (same test hooks); times are UTC here,
// the script redraws them in the browser's time zone.
import type { JobStatus } from '../monitor/status.js';

export type JobRow = JobStatus & { nextRunAt: Date | null; scheduleNote: string | null };

export interface PageData {
  now: Date;
  warningRatio: number;
  total: number;
  offset: number;
  limit: number;
  /** True when the 24 h figures were left out (they show as …). */
  partial?: boolean;
  jobs: JobRow[];
}

const HIDDEN = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/g;

function mark(ch: string): string {
  return `U+${ch.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`;
}

function escape(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Stored text as inert HTML: markup escaped, invisible and reordering characters shown as marks. */
export function visibleHtml(value: string | null | undefined): string {
  const text = value ?? '';
  let out = '';
  let last = 0;
  for (const m of text.matchAll(HIDDEN)) {
    out += escape(text.slice(last, m.index)) + `<span class="esc">${mark(m[0])}</span>`;
    last = m.index + m[0].length;
  }
  return out + escape(text.slice(last));
}

/** For attribute values: escaped, hidden characters as ⟨U+XXXX⟩. */
function attr(value: string): string {
  return escape(value.replace(HIDDEN, (c) => `\u27e8${mark(c)}\u27e9`));
}

function seconds(s: number | null): string {
  if (s === null || !Number.isFinite(s)) return '–';
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 10) return `${s.toFixed(1)}s`;
  if (s < 60) return `${Math.round(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(Math.round(s % 60) % 60).padStart(2, '0')}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

function interval(ms: number | null): string {
  if (!ms) return '–';
  for (const [unit, name] of [[86_400_000, 'd'], [3_600_000, 'h'], [60_000, 'm'], [1000, 's']] as const) if (ms % unit === 0) return `${ms / unit}${name}`;
  return seconds(ms / 1000);
}

const pct = (r: number): string => `${Math.round(r * 100)}%`;
const utc = (d: Date): string => `${d.toISOString().slice(11, 16)} UTC`;

function row(j: JobRow, now: Date, warnAt: number, partial: boolean): string {
  const ratio = j.p95IntervalRatio;
  const level = ratio === null ? 'none' : ratio >= 1 ? 'danger' : ratio >= warnAt ? 'warning' : 'ok';
  const bad = j.failed24h + j.lost24h + j.timedOut24h;
  const slots = j.runs24h + j.skips24h;
  const last = j.lastRun;
  const later = '<span class="small" title="loading the 24 h figures">…</span>';
  const cells = [
    `<td><span class="job-name">${visibleHtml(j.job)}</span></td>`,
    `<td><div class="sched mono nowrap">${visibleHtml(j.schedule)}</div><div class="small">every ${interval(j.intervalMs)}${j.timezone ? ` · ${escape(j.timezone)}` : ''} · ${escape(j.overlap)}</div>` +
      (j.scheduleNote ? `<span class="note" data-testid="schedule-note">${escape(j.scheduleNote)}</span>` : '') +
      '</td>',
    `<td class="nowrap" data-testid="next-run">${j.nextRunAt ? `${utc(j.nextRunAt)}<div class="small">${j.nextRunAt <= now ? 'due now' : `in ${seconds((j.nextRunAt.getTime() - now.getTime()) / 1000)}`}</div>` : '–'}</td>`,
    `<td><span class="pill ${j.state}">${j.state}</span></td>`,
    `<td class="mono nowrap">${j.holder ? visibleHtml(j.holder) : '–'}</td>`,
    `<td class="num">${seconds(j.leaseAgeSeconds)}</td>`,
    `<td class="nowrap">${last ? `<span class="pill ${attr(last.outcome)}">${visibleHtml(last.outcome)}</span>${last.error ? `<div class="small" title="${attr(last.error)}">${visibleHtml(last.error.length > 48 ? `${last.error.slice(0, 47)}…` : last.error)}</div>` : ''}` : '<span class="pill none">never ran</span>'}</td>`,
    partial ? `<td class="num" data-testid="failures">${later}</td>` : `<td class="num" data-testid="failures"><span${bad ? ' class="count-bad"' : ''}>${bad ? `${bad} of ${j.runs24h} · ${pct(bad / j.runs24h)}` : `0 of ${j.runs24h}`}</span></td>`,
    partial ? `<td class="num">${later}</td>` : `<td class="num">${j.p50Seconds === null ? '–' : `${seconds(j.p50Seconds)} / ${seconds(j.p95Seconds)}`}</td>`,
    partial ? `<td class="ratio none" data-testid="ratio" data-level="none">${later}</td>` : `<td class="ratio ${level}" data-testid="ratio" data-level="${level}"><span class="value">${ratio === null ? '–' : pct(ratio)}</span></td>`,
    partial ? `<td class="num">${later}</td>` : `<td class="num"><span${j.skips24h ? ' class="count-hot"' : ''}>${j.skips24h ? `${j.skips24h} · ${pct(j.skips24h / slots)}` : '0'}</span></td>`,
    partial ? `<td class="num">${later}</td>` : `<td class="num"><span${j.missed24h ? ' class="count-bad"' : ''}>${j.missed24h}</span></td>`,
  ];
  return `<tr data-job="${attr(j.job)}" data-state="${j.state}" data-level="${level}">${cells.join('')}</tr>`;
}

/** The table body's rows and the pager's count for the first page. */
export function renderFirstPage(data: PageData | undefined): { rows: string; count: string; empty: boolean } {
  if (!data) return { rows: '', count: 'loading…', empty: false };
  const from = data.total ? data.offset + 1 : 0;
  const to = Math.min(data.total, data.offset + data.jobs.length);
  return {
    rows: data.jobs.map((j) => row(j, data.now, data.warningRatio, data.partial === true)).join('\n'),
    count: `${from.toLocaleString('en-US')}–${to.toLocaleString('en-US')} of ${data.total.toLocaleString('en-US')} · as of ${utc(data.now)}`,
    empty: data.jobs.length === 0,
  };
}
