// The dashboard page: one self-contained HTML document (inline CSS and vanilla JS drawing inline
// SVG), no external requests, so it works offline and behind any proxy. Kept as TS modules
// rather than .html files so that it ships in dist/ with a plain `tsc` build:
// style.ts, script*.ts (the script, in four parts) and render.ts (the server-rendered first page).
//
// Test hooks: data-testid="jobs-table" (rows tr[data-job=NAME], ratio cell data-testid="ratio"
// with data-level ok|warning|danger, "next-run", "failures", "schedule-note"), "timeline-NAME"
// (an <svg>; runs data-kind="run" data-outcome=... data-runs=N (merged marks), overruns
// data-kind="overrun", skips "skip", missed slots "missed"), "interval-NAME", "timeline-axis",
// "worker" (one per live worker session), "runs-table" (the selected job's run list),
// "last-updated" (data-updated-at=ISO after each successful refresh).
import { createHash } from 'node:crypto';
import { renderFirstPage, type PageData } from './render.js';
import { SCRIPT } from './script.js';
import { STYLE } from './style.js';
import { STYLE_ACTIONS } from './style-actions.js';
import { TRENDS_CARD, TRENDS_STYLE } from './trends-card.js';

export type { PageData } from './render.js';

function legendSwatch(fill: string, label: string, extra = ''): string {
  return `<span><svg width="18" height="10" aria-hidden="true"><rect width="18" height="10" rx="2" fill="${fill}"${extra}/></svg>${label}</span>`;
}

function body(data: PageData | undefined): string {
  const first = renderFirstPage(data);
  return `
<header class="top">
  <div class="brand"><span class="mark"></span>leasehold <span class="sub">dashboard</span></div>
  <div class="summary" id="summary"></div>
  <div class="status"><span id="status-dot" class="dot"></span><span id="updated" data-testid="last-updated">loading…</span><span class="badge">read-only</span></div>
</header>
<noscript><p>JavaScript is off: this is the first page of jobs as of loading, in UTC. Reload for fresh data; paging, timelines and run lists need JavaScript.</p></noscript>
<div id="error" class="banner" data-testid="error" hidden></div>
<main>
  <section class="card">
    <div class="card-head"><h2>Jobs</h2><span class="hint">failures, durations, skips and missed slots over the last 24 h; click a job for its runs</span></div>
    <div class="pager">
      <span id="controls" hidden>
        <input id="search" type="search" placeholder="filter by name" aria-label="filter jobs by name" data-testid="search">
        <select id="filter" aria-label="show" data-testid="filter">
          <option value="all">all jobs</option><option value="running">running</option><option value="expired">expired leases</option>
          <option value="failing">failed, lost or timed out in 24 h</option><option value="creeping">p95 near or over interval</option><option value="paused">paused</option>
        </select>
        <button type="button" id="prev" aria-label="previous page">‹ prev</button><button type="button" id="next" aria-label="next page">next ›</button>
      </span>
      <span class="count" id="page-count" data-testid="page-count">${first.count}</span>
    </div>
    <div class="table-wrap"><table class="jobs" data-testid="jobs-table">
      <colgroup><col><col><col><col><col><col><col><col><col><col><col><col></colgroup>
      <thead><tr>
        <th>job</th><th>schedule</th><th>next run</th><th>state</th><th>holder</th><th class="num">lease age</th><th>last outcome</th>
        <th class="num">failed / runs 24h</th><th class="num">p50 / p95</th><th>p95 ÷ interval</th><th class="num">skips 24h</th><th class="num">missed 24h</th>
      </tr></thead>
      <tbody id="jobs-body">${first.rows}</tbody>
    </table></div>
    <p id="no-jobs" class="empty"${first.empty ? '' : ' hidden'}>No scheduled jobs match: jobs appear here once a worker started with <code>startWorker()</code> or <code>leasehold worker</code> registers them.</p>
  </section>
  <section class="card" id="runs-card" hidden>
    <div class="card-head"><h2 id="runs-title">Runs</h2><span class="hint">newest first: runs, skipped and missed slots</span><span class="spacer"></span><button type="button" id="runs-close">close</button></div>
    <div class="table-wrap"><table class="runs" data-testid="runs-table">
      <thead><tr><th>slot</th><th>what</th><th>holder</th><th class="num">fence</th><th>at</th><th class="num">duration</th><th>detail</th></tr></thead>
      <tbody id="runs-body"></tbody>
    </table></div>
    <p id="no-runs" class="empty" hidden>No runs recorded for this job.</p>
  </section>
  <section class="card">
    <div class="card-head"><h2>Timeline</h2><span class="hint">the jobs of this table page; runs from start to finish, dashed lines every interval</span><span class="spacer"></span>
      <div class="range" role="group" aria-label="time range" data-testid="range">
        <button type="button" data-hours="0.25">15m</button><button type="button" data-hours="1">1h</button><button type="button" data-hours="6">6h</button><button type="button" data-hours="24">24h</button>
      </div>
    </div>
    <div class="legend">
      ${legendSwatch('#1f9d55', 'succeeded')}${legendSwatch('#d93f3f', 'failed')}${legendSwatch('url(#lh-stripes-lost)', 'lost')}${legendSwatch('#e8890c', 'timed-out')}${legendSwatch('#98a2b3', 'aborted')}${legendSwatch('#2f6fde', 'running')}
      ${legendSwatch('url(#lh-stripes-overrun)', 'past its next slot', ' stroke="#b42323"')}
      <span><svg width="12" height="10" aria-hidden="true"><path d="M1.5 0.5 L10.5 0.5 L6 9.5 Z" fill="#e0a100"/></svg>skipped slot</span>
      <span><svg width="12" height="10" aria-hidden="true"><path d="M2 1 L10 1 L6 9 Z" fill="#fff" stroke="#5b6476" stroke-width="1.3"/></svg>missed slot</span>
    </div>
    <div id="timelines" class="timelines" data-testid="timelines"></div>
    <div id="truncated" class="notice" hidden>Showing the newest 3,000 runs, skips and missed slots of this window; older ones are left out.</div>
  </section>
${TRENDS_CARD}
  <section class="card">
    <div class="card-head"><h2>Workers</h2><span class="hint" id="workers-count"></span><span class="hint">live liveness sessions on this database and the leases held under each</span></div>
    <div class="workers" id="workers" data-testid="workers"></div>
  </section>
</main>
<footer>Times in <span id="tz">UTC</span>. Data from the jobs, leases and run history tables · <a href="metrics">/metrics</a> · <a href="healthz">/healthz</a></footer>
<svg class="defs" aria-hidden="true" focusable="false"><defs>
  <pattern id="lh-stripes-lost" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)">
    <rect width="6" height="6" fill="#f5a54a"/><rect width="3" height="6" fill="#e07b00"/>
  </pattern>
  <pattern id="lh-stripes-overrun" patternUnits="userSpaceOnUse" width="5" height="5" patternTransform="rotate(-45)">
    <rect width="1.6" height="5" fill="rgba(180,35,35,0.85)"/>
  </pattern>
</defs></svg>`;
}

const FAVICON =
  "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Crect width='16' height='16' rx='3' fill='%232f6fde'/%3E%3Crect x='3' y='7' width='10' height='4' rx='1' fill='%23fff'/%3E%3C/svg%3E";

function cspHash(source: string): string {
  return `'sha256-${createHash('sha256').update(source, 'utf8').digest('base64')}'`;
}

export interface DashboardPage {
  html: string;
  /** Allows exactly the page's own inline script and style, and requests to its own origin. */
  contentSecurityPolicy: string;
}

// the trends' and the acts' styles ride with the page's: one inline stylesheet, one hash
const PAGE_STYLE = STYLE + TRENDS_STYLE + STYLE_ACTIONS;

const CSP = [
  `default-src 'none'`,
  `script-src ${cspHash(SCRIPT)}`,
  `style-src ${cspHash(PAGE_STYLE)}`,
  `connect-src 'self'`,
  `img-src 'self' data:`,
  `base-uri 'none'`,
  `form-action 'none'`,
  `frame-ancestors 'none'`,
].join('; ');

/** The dashboard's HTML; `refreshMs` is how often it reloads its data, `data` the first table page. */
export function dashboardPage(options: { refreshMs?: number; pageSize?: number; data?: PageData | undefined } = {}): DashboardPage {
  const refreshMs = Math.round(options.refreshMs ?? 5000);
  const pageSize = Math.round(options.pageSize ?? 50);
  const html =
    `<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<meta name="viewport" content="width=device-width, initial-scale=1">\n` +
    `<title>leasehold dashboard</title>\n<link rel="icon" href="${FAVICON}">\n<style>${PAGE_STYLE}</style>\n</head>\n` +
    `<body data-refresh-ms="${refreshMs}" data-page-size="${pageSize}">${body(options.data)}\n<script>${SCRIPT}</script>\n</body>\n</html>\n`;
  return { html, contentSecurityPolicy: CSP };
}
