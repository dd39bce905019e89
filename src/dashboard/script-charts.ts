// Page script, part 5: charts of bucketed values, drawn as inline SVG (no chart library: the page
// loads nothing else, and the charts stay DOM that tests and screen readers can read).
// Each chart has a legend that tells its series apart by name and line style, not by colour
// alone; a cursor moved with the mouse or, once the chart has focus, with the arrow keys, whose
// bucket is read out as text (aria-live); and a table of every value under "values".
export const SCRIPT_CHARTS = String.raw`
  var CHART_H = 150, PAD_L = 48, PAD_R = 8, PAD_T = 10, PAD_B = 20;
  function niceMax(v) {
    if (!(v > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log(v) / Math.LN10)), m = v / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
  }
  function fmtBucket(t, stepMs) {
    var d = new Date(t), day = pad(d.getMonth() + 1) + '-' + pad(d.getDate());
    return stepMs >= 86400e3 ? day : (stepMs >= 3600e3 ? day + ' ' : '') + fmtShort(t) + (stepMs < 60e3 ? ':' + pad(d.getSeconds()) : '');
  }
  function swatch(s) {
    return el('span', null, [sv('svg', { width: 22, height: 10, 'aria-hidden': 'true' },
      s.bars ? sv('rect', { x: 3, y: 1, width: 16, height: 8, fill: s.color }) : sv('line', { x1: 1, x2: 21, y1: 5, y2: 5, stroke: s.color, 'stroke-width': s.width || 2, 'stroke-dasharray': s.dash || null })), visible(s.name)]);
  }

  // o: { id, title, note, times: [ms], stepMs, series: [{ name, values, color, dash, width, bars }],
  //      fmt: value -> text, ref: { value, label } or null, width }
  function chart(o) {
    var n = o.times.length, plotW = Math.max(120, o.width - PAD_L - PAD_R), plotH = CHART_H - PAD_T - PAD_B;
    var bars = o.series.filter(function (s) { return s.bars; }), top = o.ref ? o.ref.value : 0;
    for (var i = 0; i < n; i++) {
      var stack = 0;
      o.series.forEach(function (s) { var v = s.values[i]; if (v === null || v === undefined) return; if (s.bars) stack += v; else top = Math.max(top, v); });
      top = Math.max(top, stack);
    }
    var yMax = niceMax(top), bw = plotW / Math.max(1, n);
    var xOf = function (k) { return PAD_L + (k + 0.5) * bw; }, yOf = function (v) { return PAD_T + plotH - (v / yMax) * plotH; };
    var svg = sv('svg', { width: o.width, height: CHART_H, role: 'img', 'aria-label': o.title + (o.summary ? ': ' + o.summary : '') });
    [0, 0.5, 1].forEach(function (f) {
      var y = yOf(yMax * f);
      append(svg, [sv('line', { x1: PAD_L, x2: PAD_L + plotW, y1: y, y2: y, stroke: f ? '#eef0f3' : '#c8ced8' }),
        sv('text', { x: PAD_L - 6, y: y + 4, 'text-anchor': 'end', text: o.fmt(yMax * f) })]);
    });
    if (n) {
      var from = o.times[0], to = o.times[n - 1] + o.stepMs, step = axisStep(to - from, plotW);
      alignedTicks(from, to, step).forEach(function (t) {
        var px = PAD_L + (t - from) / (to - from) * plotW;
        if (px > PAD_L + 20 && px < PAD_L + plotW - 20) append(svg, sv('text', { x: px, y: CHART_H - 5, 'text-anchor': 'middle', text: step >= 86400e3 ? fmtBucket(t, step) : fmtShort(t) }));
      });
    }
    var base = new Array(n).fill(0);
    bars.forEach(function (s) {
      var g = sv('g', { 'data-series': s.name });
      s.values.forEach(function (v, k) {
        if (!v) return;
        var y0 = yOf(base[k]), y1 = yOf(base[k] + v);
        append(g, sv('rect', { x: PAD_L + k * bw + bw * 0.1, y: y1, width: Math.max(1, bw * 0.8), height: Math.max(0.5, y0 - y1), fill: s.color, 'data-value': v }));
        base[k] += v;
      });
      append(svg, g);
    });
    if (o.ref) {
      var ry = yOf(o.ref.value);
      append(svg, [sv('line', { class: 'ref', 'data-testid': 'ref-' + o.id, 'data-value': o.ref.value, x1: PAD_L, x2: PAD_L + plotW, y1: ry, y2: ry, stroke: '#b42323', 'stroke-width': 1.5, 'stroke-dasharray': '6 3' }),
        sv('text', { x: PAD_L + plotW - 2, y: ry - 4, 'text-anchor': 'end', fill: '#b42323', text: o.ref.label })]);
    }
    o.series.forEach(function (s) {
      if (s.bars) return;
      // a bucket without runs has no value, not zero: the line joins the buckets that have one,
      // and each value is also a dot while they are few enough to tell apart
      var d = '', points = [];
      s.values.forEach(function (v, k) {
        if (v === null || v === undefined) return;
        d += (points.length ? 'L' : 'M') + xOf(k).toFixed(1) + ' ' + yOf(v).toFixed(1) + ' ';
        points.push([xOf(k), yOf(v)]);
      });
      append(svg, sv('path', { d: d || 'M0 0', fill: 'none', stroke: s.color, 'stroke-width': s.width || 2, 'stroke-dasharray': s.dash || null, 'stroke-linejoin': 'round', 'data-series': s.name, 'data-points': points.length }));
      if (points.length <= plotW / 10) points.forEach(function (p) { append(svg, sv('circle', { cx: p[0], cy: p[1], r: 2.2, fill: s.color })); });
    });
    var cursor = sv('line', { y1: PAD_T, y2: PAD_T + plotH, stroke: '#1d2433', 'stroke-opacity': 0.5, visibility: 'hidden' });
    append(svg, cursor);

    var readout = el('div', { class: 'readout small', 'aria-live': 'polite', 'data-testid': 'readout-' + o.id, text: 'point at a bucket, or focus the chart and use the arrow keys' });
    var plot = el('div', { class: 'chart-plot', tabindex: 0, 'data-testid': 'chart-' + o.id, 'aria-label': o.title + ' chart: left and right arrow keys read each bucket' }, svg);
    var at = -1;
    function show(k) {
      if (!n) return;
      at = Math.max(0, Math.min(n - 1, k));
      cursor.setAttribute('x1', xOf(at)); cursor.setAttribute('x2', xOf(at)); cursor.setAttribute('visibility', 'visible');
      readout.textContent = plain(describe(o, at));
      readout.setAttribute('data-bucket', at);
    }
    plot.addEventListener('keydown', function (e) {
      var k = e.key === 'ArrowLeft' ? at - 1 : e.key === 'ArrowRight' ? at + 1 : e.key === 'Home' ? 0 : e.key === 'End' ? n - 1 : null;
      if (k === null) return;
      e.preventDefault();
      show(at < 0 ? n - 1 : k);
    });
    plot.addEventListener('focus', function () { if (at < 0) show(n - 1); });
    svg.addEventListener('mousemove', function (e) { var r = svg.getBoundingClientRect(); show(Math.floor((e.clientX - r.left - PAD_L) / bw)); });

    return el('figure', { class: 'chart', 'data-chart': o.id }, [
      el('figcaption', null, [el('b', { text: o.title }), o.note ? el('span', { class: 'small', text: ' · ' + o.note }) : null]),
      el('div', { class: 'chart-legend' }, o.series.map(swatch).concat(o.ref ? [swatch({ name: o.ref.label, color: '#b42323', dash: '6 3', width: 1.5 })] : [])),
      plot, readout, o.summary ? el('div', { class: 'small chart-summary', 'data-testid': 'summary-' + o.id, text: plain(o.summary) }) : null,
      valuesTable(o),
    ]);
  }

  function describe(o, k) {
    return fmtBucket(o.times[k], o.stepMs) + ' – ' + fmtBucket(o.times[k] + o.stepMs, o.stepMs) + ': ' + o.series.map(function (s) {
      var v = s.values[k];
      return s.name + ' ' + (v === null || v === undefined ? '–' : o.fmt(v));
    }).join(' · ') + (o.ref ? ' · ' + o.ref.label : '');
  }

  // every bucket that has a value, as rows of text
  function valuesTable(o) {
    var rows = [];
    o.times.forEach(function (t, k) {
      if (!o.series.some(function (s) { return s.values[k] !== null && s.values[k] !== undefined && (s.values[k] !== 0 || !s.bars); })) return;
      rows.push(el('tr', null, [el('td', { class: 'nowrap', text: fmtBucket(t, o.stepMs) })].concat(o.series.map(function (s) {
        var v = s.values[k];
        return el('td', { class: 'num', text: v === null || v === undefined ? '–' : o.fmt(v) });
      }))));
    });
    return el('details', { class: 'chart-values' }, [el('summary', { text: 'values (' + rows.length + ' buckets)' }),
      el('div', { class: 'table-wrap' }, el('table', { class: 'runs', 'data-testid': 'values-' + o.id }, [
        el('thead', null, el('tr', null, [el('th', { text: 'from' })].concat(o.series.map(function (s) { return el('th', { class: 'num' }, visible(s.name)); })))),
        el('tbody', null, rows)]))]);
  }
`;
