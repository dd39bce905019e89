// Page script, part 1: DOM helpers and formatting. Text from the database (job names, holders,
// errors) only ever reaches the page through textContent, and invisible or reordering
// characters (controls, ESC sequences, bidi overrides, zero-width) are shown as U+XXXX marks.
export const SCRIPT_FORMAT = String.raw`
  var SVG = 'http://www.w3.org/2000/svg';
  var HIDDEN = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/g;
  function mark(ch) { return 'U+' + ch.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0'); }
  // plain text for attributes and tooltips
  function plain(s) { return s === null || s === undefined ? '' : String(s).replace(HIDDEN, function (c) { return '\u27e8' + mark(c) + '\u27e9'; }); }
  // a node for table cells: hidden characters become visible marks
  function visible(s) {
    var text = s === null || s === undefined ? '' : String(s);
    var span = document.createElement('span');
    var last = 0;
    text.replace(HIDDEN, function (c, i) {
      if (i > last) span.appendChild(document.createTextNode(text.slice(last, i)));
      var m = document.createElement('span'); m.className = 'esc'; m.textContent = mark(c); span.appendChild(m);
      last = i + c.length; return c;
    });
    if (last < text.length) span.appendChild(document.createTextNode(text.slice(last)));
    return span;
  }
  function el(tag, attrs, children) { var node = document.createElement(tag); setAttrs(node, attrs); append(node, children); return node; }
  function sv(tag, attrs, children) { var node = document.createElementNS(SVG, tag); setAttrs(node, attrs); append(node, children); return node; }
  function setAttrs(node, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined || v === false) return;
      if (k === 'text') node.textContent = String(v);
      else node.setAttribute(k, k === 'title' || k.indexOf('aria-') === 0 ? plain(v) : String(v));
    });
  }
  function append(node, children) {
    if (children === null || children === undefined) return;
    if (!Array.isArray(children)) children = [children];
    children.forEach(function (c) {
      if (c === null || c === undefined || c === false) return;
      node.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
    });
  }
  function pad(n) { return n < 10 ? '0' + n : String(n); }
  function fmtClock(t) { var d = new Date(t); return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()); }
  function fmtShort(t) { var d = new Date(t); return pad(d.getHours()) + ':' + pad(d.getMinutes()); }
  function fmtDateTime(t) { var d = new Date(t); return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + fmtClock(t); }
  function fmtSeconds(s) {
    if (s === null || s === undefined || !isFinite(s)) return '–';
    if (s < 1) return (Math.round(s * 1000)) + ' ms';
    if (s < 10) return s.toFixed(1) + 's';
    if (s < 60) return Math.round(s) + 's';
    if (s < 3600) { var m = Math.floor(s / 60); return m + 'm ' + pad(Math.round(s - m * 60) % 60) + 's'; }
    if (s < 86400) { var h = Math.floor(s / 3600); return h + 'h ' + pad(Math.floor((s - h * 3600) / 60)) + 'm'; }
    var d = Math.floor(s / 86400); return d + 'd ' + Math.floor((s - d * 86400) / 3600) + 'h';
  }
  function fmtInterval(ms) {
    if (!ms) return '–';
    var units = [[86400000, 'd'], [3600000, 'h'], [60000, 'm'], [1000, 's']];
    for (var i = 0; i < units.length; i++) if (ms % units[i][0] === 0) return (ms / units[i][0]) + units[i][1];
    return fmtSeconds(ms / 1000);
  }
  function fmtIn(ms) { return ms <= 0 ? 'due now' : 'in ' + fmtSeconds(ms / 1000); }
  function fmtHours(h) { return h < 1 ? Math.round(h * 60) + ' min' : h + ' h'; }
  function pct(r) { return Math.round(r * 100) + '%'; }
  function time(v) { return v ? Date.parse(v) : null; }
  function num(n) { return Number(n).toLocaleString('en-US'); }
`;
