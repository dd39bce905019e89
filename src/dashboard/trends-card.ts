// The Trends card's markup and stylesheet (drawn by script-trends.ts and script-charts.ts).
// Its range buttons are named "trends over …" so that they never share a name with the
// timeline's 15m / 1h / 6h / 24h buttons.
const RANGES: Array<[number, string, string]> = [
  [1, '1h', '1 hour'],
  [6, '6h', '6 hours'],
  [24, '24h', '24 hours'],
  [168, '7d', '7 days (one job)'],
  [744, '31d', '31 days (one job)'],
];

export const TRENDS_CARD = `<section class="card" id="trends-card">
    <div class="card-head"><h2 id="trends-title">Trends</h2><span class="hint" id="trends-hint">loading…</span><span class="spacer"></span>
      <button type="button" id="trends-fleet" class="plain" hidden>show the fleet</button>
      <div class="range" role="group" aria-label="trends range" data-testid="trend-range">
        ${RANGES.map(([hours, label, long]) => `<button type="button" data-trend-hours="${hours}" aria-label="trends over ${long}">${label}</button>`).join('')}
      </div>
    </div>
    <div id="trends" class="trends" data-testid="trends"></div>
  </section>`;

export const TRENDS_STYLE = String.raw`
.trends { display: grid; grid-template-columns: minmax(0, 1fr); gap: 12px 20px; }
.trends.two { grid-template-columns: repeat(2, minmax(0, 1fr)); }
.chart { margin: 0; min-width: 0; }
.chart figcaption { font-size: 13px; margin-bottom: 2px; }
.chart-legend { display: flex; flex-wrap: wrap; gap: 2px 12px; color: var(--muted); font-size: 12px; }
.chart-legend span { display: inline-flex; align-items: center; gap: 4px; }
.chart-plot { border-radius: 6px; }
.chart-plot:focus-visible { outline: 2px solid var(--run); outline-offset: 2px; }
.chart-plot svg { display: block; }
.readout { min-height: 1.4em; }
.chart-summary { color: var(--ink); overflow-wrap: anywhere; }
.chart-values summary { cursor: pointer; color: var(--muted); font-size: 12px; }
.chart-values table { margin-top: 4px; }
.range button[disabled] { color: #c0c5cf; cursor: default; }
button.plain { font: inherit; font-size: 13px; padding: 3px 10px; border: 1px solid var(--line); border-radius: 6px; background: var(--card); cursor: pointer; }
`;
