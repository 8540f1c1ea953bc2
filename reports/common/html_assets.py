"""The CSS and JavaScript inlined into every HTML report (no network)."""

CSS = """
:root{--fg:#1d2330;--muted:#667;--line:#d8dce4;--bad:#c62828;--warn:#b26a00;--ok:#2e7d32;--accent:#3559c7}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:var(--fg);background:#f6f7fa}
main{max-width:1180px;margin:0 auto;padding:16px 20px 60px}header h1{margin:8px 0 0;font-size:22px}header p{margin:2px 0 12px;color:var(--muted)}
section.target{background:#fff;border:1px solid var(--line);border-radius:10px;padding:14px 18px;margin:16px 0}
h2{margin:4px 0 10px;font-size:19px}h3{margin:18px 0 6px;font-size:16px}h4{margin:10px 0 4px;font-size:14px}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{flex:1 1 170px;border:1px solid var(--line);border-radius:8px;padding:8px 10px;background:#fbfcfe}
.card .label{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}.card .value{font-size:18px;font-weight:600}
.card .sub{font-size:12px;color:var(--muted)}.bar{height:6px;background:#e7e9ef;border-radius:3px;margin-top:6px}
.fill{height:6px;border-radius:3px;background:var(--ok)}.fill.warn{background:var(--warn)}.fill.bad{background:var(--bad)}
.card.bad{border-color:var(--bad)}.card.warn{border-color:var(--warn)}
table{border-collapse:collapse;width:100%;font-size:13px;margin:4px 0}th,td{border-bottom:1px solid var(--line);padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f0f2f6;cursor:pointer;user-select:none;white-space:nowrap}th.asc:after{content:" \\25B2"}th.desc:after{content:" \\25BC"}
td.op{font-family:ui-monospace,monospace;font-size:12px;overflow-wrap:anywhere;word-break:normal;max-width:360px}
.memory{display:block}.memory .plot{max-width:1100px}.memory .live{margin-top:12px}.memory td:first-child{white-space:nowrap}
svg.memplot,svg.sweepplot{width:100%;height:auto;background:#fff;border:1px solid var(--line);border-radius:6px}
svg .pareto{fill:none;stroke:var(--accent);stroke-width:1.4;stroke-dasharray:5 3}svg .cand{stroke:#fff;stroke-width:1.5}
svg .cand.best{fill:var(--ok)}svg .cand.pareto{fill:var(--accent)}svg .cand.other{fill:var(--muted)}svg .cand.over{fill:var(--bad)}
tr.over td{color:var(--bad)}tr.failed td{color:var(--muted)}
svg .grid{stroke:#e3e6ec}svg .live{fill:none;stroke:var(--accent);stroke-width:1.6}svg .budget{stroke:var(--bad);stroke-dasharray:6 4}
svg .peak{stroke:var(--warn);stroke-dasharray:3 3}svg .peak-dot{fill:var(--warn)}svg .headline{stroke:#333;stroke-dasharray:2 3}svg .tick{font-size:11px;fill:var(--muted)}svg.memplot .tick{font-size:13px}svg .curve-max{fill:var(--warn)}
.grids{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0;padding:6px;border:1px solid var(--line);border-radius:6px;background:#fbfcfe}
figcaption{font-size:12px;margin-bottom:4px;max-width:520px}svg.grid text{font-size:11px;font-family:ui-monospace,monospace}
.finding{border-left:4px solid var(--line);padding:4px 10px;margin:8px 0;background:#fbfcfe}.finding.error{border-color:var(--bad)}
.finding.warning{border-color:var(--warn)}.finding p{margin:4px 0}.fix code,.fixtext{background:#eef4ee}
.sev{font-size:11px;font-weight:700;text-transform:uppercase;padding:1px 6px;border-radius:4px;background:#e7e9ef}
.count{font-size:12px;font-weight:600;color:#6b3fa0;margin-left:6px}.param code{word-break:normal}
a.sev{text-decoration:none}.sev.error{background:#fde2e2;color:var(--bad)}.sev.warning{background:#fff1d6;color:var(--warn)}.sev.info{background:#e3ecff}
.tag{font-size:10px;background:#e7e9ef;border-radius:3px;padding:0 4px;white-space:nowrap}.muted{color:var(--muted)}.warning{color:var(--warn)}
pre{white-space:pre-wrap;font-size:12px;background:#f6f7fa;padding:8px;border-radius:6px}code{font-size:12px}
details summary{cursor:pointer;color:var(--accent)}
"""

SCRIPT = """
(function(){
  var errors = [];
  window.addEventListener('error', function(ev){ errors.push(String(ev.message)); document.body.setAttribute('data-js-errors', errors.join(' | ')); });
  function key(cell){ var v = cell.getAttribute('data-v'); if (v !== null && v !== '' && !isNaN(Number(v))) return Number(v); return cell.textContent.trim().toLowerCase(); }
  function sortBy(table, col, th){
    var body = table.tBodies[0]; if (!body) return;
    var asc = !th.classList.contains('asc');
    Array.prototype.forEach.call(th.parentNode.children, function(h){ h.classList.remove('asc','desc'); });
    th.classList.add(asc ? 'asc' : 'desc');
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function(a, b){ var x = key(a.cells[col]), y = key(b.cells[col]); if (x < y) return asc ? -1 : 1; if (x > y) return asc ? 1 : -1; return 0; });
    rows.forEach(function(r){ body.appendChild(r); });
  }
  Array.prototype.forEach.call(document.querySelectorAll('table.sortable'), function(table){
    var head = table.tHead; if (!head) return;
    Array.prototype.forEach.call(head.rows[0].cells, function(th, i){ th.addEventListener('click', function(){ sortBy(table, i, th); }); });
  });
  document.body.setAttribute('data-js-ready', 'yes');
})();
"""
