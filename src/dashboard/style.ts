// The dashboard page's stylesheet (inline; the page loads nothing from the network).
export const STYLE = String.raw`
:root {
  --bg: #f5f6f8; --card: #ffffff; --ink: #1d2433; --muted: #667085; --line: #e4e7ec; --soft: #f9fafb;
  --ok: #1f9d55; --fail: #d93f3f; --lost: #ee8a1a; --aborted: #98a2b3; --run: #2f6fde; --skip: #e0a100; --warn-bg: #fff6dc; --danger-bg: #fde8e8;
}
* { box-sizing: border-box; }
html, body { margin: 0; background: var(--bg); color: var(--ink); }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; font-size: 12.5px; }
header.top { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 24px; padding: 14px 28px; background: var(--card); border-bottom: 1px solid var(--line); }
.brand { font-weight: 650; font-size: 17px; letter-spacing: -0.01em; display: flex; align-items: center; gap: 8px; }
.brand .mark { width: 14px; height: 14px; border-radius: 3px; background: linear-gradient(135deg, #2f6fde, #1f9d55); display: inline-block; }
.brand .sub { color: var(--muted); font-weight: 500; }
.summary { color: var(--muted); flex: 1; }
.summary b { color: var(--ink); font-weight: 600; }
.summary .warn { color: #9a6700; }
.summary .danger { color: var(--fail); }
.status { display: flex; align-items: center; gap: 8px; color: var(--muted); font-size: 13px; white-space: nowrap; }
.dot { width: 8px; height: 8px; border-radius: 50%; background: var(--aborted); display: inline-block; }
.dot.ok { background: var(--ok); }
.dot.error { background: var(--fail); }
.badge { border: 1px solid var(--line); border-radius: 999px; padding: 1px 8px; font-size: 12px; color: var(--muted); }
.banner { margin: 16px 28px 0; padding: 10px 14px; border-radius: 8px; background: var(--danger-bg); color: #8a1f1f; border: 1px solid #f5c2c2; }
/* minmax(0, 1fr): a wide table scrolls inside its card instead of widening the page */
main { padding: 20px 28px 8px; display: grid; grid-template-columns: minmax(0, 1fr); gap: 20px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 16px 18px; box-shadow: 0 1px 2px rgba(16, 24, 40, 0.04); }
.card-head { display: flex; align-items: center; gap: 12px; margin-bottom: 10px; }
.card-head h2 { font-size: 15px; margin: 0; font-weight: 650; }
.card-head .hint { color: var(--muted); font-size: 12.5px; }
.card-head .spacer { flex: 1; }
table.jobs { width: 100%; border-collapse: collapse; }
table.jobs th { text-align: left; font-weight: 600; font-size: 12px; color: var(--muted); padding: 6px 8px; border-bottom: 1px solid var(--line); }
table.jobs td { padding: 8px 8px; border-bottom: 1px solid var(--line); vertical-align: middle; }
table.jobs tr:last-child td { border-bottom: none; }
table.jobs tbody tr:hover td { background: var(--soft); }
table.jobs .num { text-align: right; font-variant-numeric: tabular-nums; }
.job-name { font-weight: 600; }
.nowrap { white-space: nowrap; }
.table-wrap { overflow-x: auto; }
.sched { color: var(--ink); }
.small { color: var(--muted); font-size: 12px; }
.pill { display: inline-flex; align-items: center; gap: 6px; padding: 2px 9px; border-radius: 999px; font-size: 12px; font-weight: 550; white-space: nowrap; }
.pill::before { content: ""; width: 7px; height: 7px; border-radius: 50%; background: currentColor; }
.pill.running { color: var(--run); background: #e8f0fd; }
.pill.idle { color: #667085; background: #f0f1f4; }
.pill.expired { color: #b25e00; background: #fff0dd; }
.pill.paused { color: #5b4b8a; background: #efeaf8; }
.pill.succeeded { color: #177a42; background: #e3f5ea; }
.pill.failed { color: #b42323; background: #fde8e8; }
.pill.lost { color: #b25e00; background: #fff0dd; }
.pill.aborted { color: #555e6e; background: #eef0f3; }
.pill.none { color: var(--muted); background: #f0f1f4; }
.ratio { white-space: nowrap; }
.ratio .meter { display: inline-block; vertical-align: middle; width: 44px; height: 8px; border-radius: 4px; background: #eef0f3; position: relative; overflow: hidden; margin-right: 6px; }
.ratio .meter .fill { position: absolute; left: 0; top: 0; bottom: 0; background: var(--ok); border-radius: 4px; }
.ratio .meter .mark { position: absolute; top: 0; bottom: 0; width: 1px; background: rgba(0, 0, 0, 0.35); }
.ratio .value { font-variant-numeric: tabular-nums; font-weight: 600; }
td.ratio.warning { background: var(--warn-bg); }
td.ratio.warning .fill { background: var(--skip); }
td.ratio.warning .value { color: #9a6700; }
td.ratio.danger { background: var(--danger-bg); }
td.ratio.danger .fill { background: var(--fail); }
td.ratio.danger .value { color: var(--fail); }
tr:hover td.ratio.warning { background: #fff0c7; }
tr:hover td.ratio.danger { background: #fbdcdc; }
.count-hot { color: #9a6700; font-weight: 600; }
.count-bad { color: var(--fail); font-weight: 600; }
.empty { color: var(--muted); padding: 14px 4px; margin: 0; }
.range { display: inline-flex; border: 1px solid var(--line); border-radius: 8px; overflow: hidden; }
.range button { font: inherit; font-size: 13px; border: none; background: var(--card); color: var(--ink); padding: 4px 12px; cursor: pointer; border-left: 1px solid var(--line); }
.range button:first-child { border-left: none; }
.range button[aria-pressed="true"] { background: var(--ink); color: #fff; }
.range button:focus-visible { outline: 2px solid var(--run); outline-offset: -2px; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 16px; color: var(--muted); font-size: 12px; margin: 2px 0 10px; }
.legend span { display: inline-flex; align-items: center; gap: 6px; }
.legend svg { display: block; }
.timelines { display: grid; gap: 0; }
.lane-row { display: grid; grid-template-columns: 190px 1fr; align-items: stretch; border-top: 1px solid var(--line); }
.lane-row.axis { border-top: none; }
.lane-label { padding: 8px 12px 6px 2px; min-width: 0; }
.lane-label .job-name { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; display: block; }
.lane-label .small { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; display: block; }
.lane-chart { min-width: 0; padding: 4px 0; }
.lane-chart svg, .axis svg { display: block; overflow: visible; }
svg text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: #667085; }
svg .run:hover, svg .skip:hover, svg .missed:hover { stroke: #1d2433; stroke-width: 1.2; }
.notice { color: #9a6700; font-size: 12px; margin-top: 8px; }
footer { padding: 8px 28px 24px; color: var(--muted); font-size: 12px; }
footer a { color: var(--muted); }
.defs { position: absolute; width: 0; height: 0; }
.card { contain: layout; }
/* fixed layout: column widths come from the colgroup, not from measuring every cell on each refresh */
table.jobs { table-layout: fixed; min-width: 1100px; }
table.jobs td { overflow-wrap: anywhere; }
table.jobs col:nth-child(1) { width: 11%; } table.jobs col:nth-child(2) { width: 11%; } table.jobs col:nth-child(3) { width: 6%; } table.jobs col:nth-child(4) { width: 7%; } table.jobs col:nth-child(5) { width: 8%; } table.jobs col:nth-child(6) { width: 6%; } table.jobs col:nth-child(7) { width: 11%; } table.jobs col:nth-child(8) { width: 9%; } table.jobs col:nth-child(9) { width: 8%; } table.jobs col:nth-child(10) { width: 10%; } table.jobs col:nth-child(11) { width: 6%; } table.jobs col:nth-child(12) { width: 7%; }
.pager { display: flex; align-items: center; gap: 10px; margin: 0 0 10px; flex-wrap: wrap; }
.pager input[type=search] { font: inherit; font-size: 13px; padding: 4px 8px; border: 1px solid var(--line); border-radius: 6px; min-width: 200px; }
.pager select, .pager button { font: inherit; font-size: 13px; padding: 4px 10px; border: 1px solid var(--line); border-radius: 6px; background: var(--card); cursor: pointer; }
.pager button[disabled] { opacity: 0.45; cursor: default; }
.pager .count { color: var(--muted); font-size: 12.5px; }
table.jobs tbody tr { cursor: pointer; }
table.jobs tbody tr[aria-selected="true"] td { background: #eef4ff; }
.note { color: #9a6700; font-size: 11.5px; display: block; max-width: 260px; }
.esc { color: #b42323; background: #fde8e8; border-radius: 3px; padding: 0 2px; font-family: ui-monospace, monospace; font-size: 11px; }
.workers { display: flex; flex-wrap: wrap; gap: 8px; }
.worker { border: 1px solid var(--line); border-radius: 8px; padding: 6px 10px; font-size: 12.5px; background: var(--soft); }
.worker b { font-weight: 600; }
table.runs { width: 100%; border-collapse: collapse; font-size: 13px; }
table.runs th, table.runs td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); }
table.runs th { font-size: 12px; color: var(--muted); font-weight: 600; }
.tooltip { position: fixed; z-index: 10; pointer-events: none; background: #1d2433; color: #fff; font-size: 12px; padding: 6px 8px; border-radius: 6px; white-space: pre-wrap; max-width: min(420px, calc(100vw - 16px)); }
svg rect.run.requested { stroke: #1d2433; stroke-width: 1; stroke-dasharray: 3 2; }
.window-note { align-self: end; padding: 0 12px 4px 2px; }
/* narrow screens: the timeline's labels above their lanes (the script sets .stacked), the header wraps */
.timelines.stacked .lane-row { grid-template-columns: minmax(0, 1fr); }
.timelines.stacked .lane-label { padding: 6px 0 0; }
.timelines.stacked .lane-label .small { display: inline; margin-left: 8px; }
.timelines.stacked .window-note { padding: 0; }
@media (max-width: 640px) {
  header.top { padding: 10px 12px; gap: 4px 12px; }
  .summary { order: 3; flex-basis: 100%; font-size: 13px; }
  .status { white-space: normal; flex-wrap: wrap; }
  .banner { margin: 12px 12px 0; }
  main { padding: 12px 8px 6px; gap: 12px; }
  .card { padding: 12px 10px; }
  .card-head { flex-wrap: wrap; gap: 4px 12px; }
  .pager input[type=search] { min-width: 0; flex: 1 1 140px; }
  footer { padding: 8px 12px 20px; }
  noscript p { margin: 12px 12px 0; }
}
noscript p { margin: 12px 28px 0; color: #9a6700; }
`;
