// The stylesheet of the acts (script-actions.ts): the person in the header, the bar of acts in
// the runs card, its forms and the result line. Appended to the page's own (style.ts).
export const STYLE_ACTIONS = String.raw`
.session { white-space: nowrap; }
.session a { color: var(--run); }
button.quiet { font: inherit; font-size: 12.5px; border: none; background: none; color: var(--run); cursor: pointer; padding: 0 2px; }
.job-actions { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 0 0 12px; }
.job-actions > button, .act-form button:not(.quiet) { font: inherit; font-size: 13px; padding: 4px 10px; border: 1px solid var(--line); border-radius: 6px; background: var(--card); cursor: pointer; }
.job-actions button:focus-visible, .act-form input:focus-visible { outline: 2px solid var(--run); outline-offset: 1px; }
.act-form { flex-basis: 100%; border: 1px solid var(--line); border-radius: 8px; background: var(--soft); padding: 10px 12px; display: grid; gap: 8px; }
.act-form p { margin: 0; }
.act-row { display: flex; flex-wrap: wrap; gap: 6px 10px; align-items: center; }
.act-row input[type=text], .act-row input:not([type]) { font: inherit; font-size: 13px; padding: 4px 8px; border: 1px solid var(--line); border-radius: 6px; max-width: 100%; }
.act-form button.primary { border-color: var(--run); background: var(--run); color: #fff; }
.act-form button.danger { border-color: var(--fail); background: var(--fail); color: #fff; }
.act-slots ul { margin: 0 0 8px; padding-left: 18px; font-size: 12.5px; font-variant-numeric: tabular-nums; }
.act-result { flex-basis: 100%; margin: 0; font-size: 13px; }
.act-result:empty { display: none; }
.act-result.ok { color: #177a42; }
.act-result.error { color: #b42323; }
`;
