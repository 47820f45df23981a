"""The dashboard's stylesheet and script, served as /static/dashboard.css and /static/dashboard.js.

The pages carry no inline script, style or event handler (the Content-Security-Policy forbids
them: wiggle/_server/web/errors.py CSP): buttons say what they do in ``data-*`` attributes and
this script listens for clicks on the document. It re-fetches the page's ``<main>`` every few
seconds, runs the actions (a dialog asks for confirmation and who is acting, then POSTs JSON with
the page's anti-forgery token), and signs in and out.
"""

from __future__ import annotations

import hashlib

__all__ = ["STYLE", "SCRIPT", "ASSETS", "VERSION"]

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:10px 20px;display:flex;gap:22px;align-items:center}
header a{color:#cfd6e4;text-decoration:none}header a.on{color:#fff;font-weight:600}
header b{font-size:16px;margin-right:10px}main{padding:16px 20px}
header .who{color:#cfd6e4}header .who button{margin-left:8px}
table{border-collapse:collapse;background:#fff;margin:8px 0 18px;min-width:60%}
th,td{border-bottom:1px solid #e3e6ec;padding:5px 9px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.num{text-align:right}code,pre{font:12px/1.35 ui-monospace,monospace}
pre{background:#fff;border:1px solid #e3e6ec;padding:8px;overflow:auto;max-height:420px}
pre.tb{background:#fff5f5;border-color:#f0c4c4;margin:4px 0}
.pill{display:inline-block;padding:1px 8px;border-radius:10px;background:#e3e6ec;margin-right:6px}
.RUNNING{background:#dbe9ff}.COMPLETED{background:#d9f2df}.FAILED{background:#fbdada}.CANCELLED{background:#eee}
form.filters input,form.filters select{margin-right:8px}button{cursor:pointer}
svg.graph .node rect{fill:#fff;stroke:#8a93a6;stroke-width:1.5}
svg.graph text.name{font:600 12px system-ui}svg.graph text.sub{font:11px system-ui;fill:#4a5366}
svg.graph .done rect{fill:#d9f2df;stroke:#3c9a55}svg.graph .failed rect{fill:#fbdada;stroke:#c0392b}
svg.graph .retrying rect{fill:#fff0d6;stroke:#d68910}svg.graph .running rect{fill:#dbe9ff;stroke:#2e6bd1}
svg.graph .local-run rect{fill:#e8dcff;stroke:#7d4cdb}svg.graph .ready rect{fill:#fffbe0;stroke:#b7950b}
svg.graph .awaiting rect,svg.graph .sleeping rect,svg.graph .joined rect{fill:#e0f7fa;stroke:#117a8b}
svg.graph .signal rect{fill:#fdf0ff;stroke:#8e44ad}
header .clock{margin-left:auto;color:#cfd6e4;font-size:12px}header .clock button{margin-left:6px}
#notice{margin:10px 20px 0;padding:8px 12px;border-radius:6px;background:#d9f2df}#notice.err{background:#fbdada}
form.filters div{margin:4px 0}form.filters input.time{width:230px}form.filters input.ctx{width:200px}
.child-of{font-size:12px}td.times{white-space:nowrap;font-size:12px}
dialog{border:1px solid #8a93a6;border-radius:8px;padding:16px 18px;min-width:340px}
dialog label{display:block;margin:8px 0}dialog input,dialog textarea{width:100%;box-sizing:border-box}
form.signin{background:#fff;border:1px solid #e3e6ec;border-radius:8px;padding:16px 18px;max-width:460px}
form.signin label{display:block;margin:8px 0}form.signin input{width:100%;box-sizing:border-box}
.err{color:#c0392b}.muted{color:#6b7385}.hidden{display:none}
td.lagging{background:#fbdada;font-weight:600}td.slots{white-space:nowrap}
"""

SCRIPT = """
'use strict';
const main = () => document.getElementById('main');
const csrf = () => (document.querySelector('meta[name="wiggle-csrf"]') || {}).content || '';
const toSignIn = () => location.assign('/signin?next=' + encodeURIComponent(location.pathname + location.search));
let busy = false;
let lastInput = 0;  // when the user last typed in the page (the refresh waits for a pause)
async function post(url, body) {
  const r = await fetch(url, {method: 'POST', credentials: 'same-origin',
    headers: {'Content-Type': 'application/json', 'X-Wiggle-CSRF': csrf()}, body: JSON.stringify(body)});
  let answer = {};
  try { answer = await r.json(); } catch (e) { answer = {error: r.statusText}; }
  return [r, answer];
}
// ---- times: UTC or the browser's zone (kept in localStorage), "last updated"
const pad = (n, w = 2) => String(n).padStart(w, '0');
function localText(ms) {
  const d = new Date(ms), off = -d.getTimezoneOffset(), a = Math.abs(off);
  return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + pad(d.getHours()) + ':' +
    pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + (off < 0 ? '-' : '+') + pad(Math.floor(a / 60)) + ':' + pad(a % 60);
}
const utcText = (ms) => new Date(ms).toISOString().slice(0, 19).replace('T', ' ') + 'Z';
const isLocal = () => localStorage.getItem('wiggle-tz') === 'local';
function showTimes() {
  const fmt = isLocal() ? localText : utcText;
  for (const t of document.querySelectorAll('time[data-ms]')) t.textContent = fmt(Number(t.dataset.ms));
  const tz = document.getElementById('tz');
  if (tz) tz.textContent = isLocal() ? 'local time' : 'UTC';
}
function updated(paused) {
  const u = document.getElementById('updated');
  if (!u) return;
  if (paused) { u.textContent = 'refresh paused while you type or select'; u.dataset.paused = '1'; return; }
  const ms = Date.now();
  u.dataset.paused = ''; u.dataset.ms = String(ms);
  u.textContent = 'updated ' + (isLocal() ? localText(ms) : utcText(ms)).slice(11);
}
// ---- the refresh: keeps what the user typed, waits while they type or select
function userIsBusy() {
  const m = main();
  const active = document.activeElement;
  if (active && m.contains(active) && active.matches('input, textarea, select')) return true;
  const sel = window.getSelection();
  if (sel && !sel.isCollapsed && sel.toString().trim() && m.contains(sel.anchorNode)) return true;
  return Date.now() - lastInput < 5000;
}
function typed() {  // inputs whose value the user changed since the page gave it: name -> value
  const out = {};
  for (const el of main().querySelectorAll('input[name], select[name]')) {
    const changed = el.type === 'checkbox' ? el.checked !== el.defaultChecked
      : el.tagName === 'SELECT' ? !el.options[el.selectedIndex] || !el.options[el.selectedIndex].defaultSelected
      : el.value !== el.defaultValue;
    if (changed) out[el.name] = el.type === 'checkbox' ? el.checked : el.value;
  }
  return out;
}
function restore(values) {
  for (const [name, value] of Object.entries(values)) {
    const el = main().querySelector('[name="' + CSS.escape(name) + '"]');
    if (!el) continue;
    if (el.type === 'checkbox') el.checked = value; else el.value = value;
  }
}
async function refresh() {
  if (!main() || main().dataset.page === 'signin' || busy || document.querySelector('dialog[open]')) return;
  if (userIsBusy()) { updated(true); return; }
  try {
    const r = await fetch(location.href, {headers: {'X-Fragment': '1'}, credentials: 'same-origin'});
    if (r.status === 401) { toSignIn(); return; }
    if (!r.ok || userIsBusy()) return;
    const html = await r.text(), keep = typed();
    main().innerHTML = html; restore(keep); showTimes(); updated(false);
    main().dataset.refreshed = String(Date.now());
  } catch (e) { /* the server is away: try again at the next tick */ }
}
setInterval(refresh, 2000);
document.addEventListener('input', (e) => { if (main() && main().contains(e.target)) lastInput = Date.now(); });
document.addEventListener('DOMContentLoaded', () => { showTimes(); updated(false); });
// ---- the dialog of the actions
function show(el, on) { el.classList.toggle('hidden', !on); }
function notice(html, bad) {
  const n = document.getElementById('notice');
  n.innerHTML = html; n.className = bad ? 'err' : 'ok';
}
function fillRetry(d, button) {
  const select = d.querySelector('#from-node');
  select.innerHTML = '';
  const at = button.dataset.failedAt;
  const first = new Option(at ? 'where it failed (' + at + ')' : 'choose a node: it failed with no step in progress', '');
  select.add(first);
  for (const n of (button.dataset.nodes || '').split(',').filter(Boolean)) select.add(new Option(n, n));
}
async function countBulk(d) {
  const count = d.querySelector('.count');
  count.textContent = 'counting what the filter matches…'; d.dataset.expected = '';
  const [r, answer] = await post(d.dataset.url, {dry_run: true});
  if (!r.ok) { count.textContent = answer.error || r.statusText; return; }
  d.dataset.expected = String(answer.count);
  count.textContent = answer.count + ' instance' + (answer.count === 1 ? '' : 's') + ' will be ' +
    (d.dataset.kind === 'bulk-cancel' ? 'cancelled' : 'retried') + '.';
}
function act(button) {
  const d = document.getElementById('confirm');
  d.querySelector('.what').textContent = button.dataset.what;
  const k = button.dataset.kind;
  show(d.querySelector('#data-row'), k === 'task' || k === 'signal');
  show(d.querySelector('#name-row'), k === 'signal');
  show(d.querySelector('#reason-row'), k === 'cancel' || k === 'bulk-cancel');
  show(d.querySelector('#from-row'), k === 'retry');
  show(d.querySelector('.count'), k.startsWith('bulk'));
  if (k === 'signal') d.querySelector('#signal-name').value = button.dataset.signal || '';
  if (k === 'retry') fillRetry(d, button);
  d.querySelector('#actor').value = localStorage.getItem('wiggle-actor') || '';
  d.querySelector('.err').textContent = '';
  d.dataset.url = button.dataset.url; d.dataset.kind = k;
  d.showModal();
  if (k.startsWith('bulk')) countBulk(d);
}
function bodyOf(d) {  // [body, url] of the confirmed action, or a string saying what is missing
  const actor = d.querySelector('#actor').value.trim();
  if (!actor) return 'Say who you are: it goes in the history.';
  localStorage.setItem('wiggle-actor', actor);
  const body = {actor}, k = d.dataset.kind;
  let url = d.dataset.url;
  if (k === 'cancel' || k === 'bulk-cancel') body.reason = d.querySelector('#reason').value;
  if (k === 'retry') {
    body.from_node = d.querySelector('#from-node').value;
    if (!body.from_node && d.querySelector('#from-node').options[0].text.startsWith('choose')) return 'Choose the node to retry from.';
  }
  if (k.startsWith('bulk')) {
    if (d.dataset.expected === '') return 'The count is not known yet: wait for it, or close and try again.';
    body.expected = Number(d.dataset.expected);
  }
  if (k === 'signal') {
    const name = d.querySelector('#signal-name').value.trim();
    if (!name) return 'Name the signal to send.';
    url += encodeURIComponent(name);
  }
  if (k === 'task' || k === 'signal') {
    try { body.data = JSON.parse(d.querySelector('#data').value || '{}'); }
    catch (e) { return 'data is not valid JSON: ' + e.message; }
  }
  return [body, url];
}
function outcome(answer) {  // what the action did, for the notice above the page
  const esc = (t) => String(t).replace(/[&<>"]/g, (c) => '&#' + c.charCodeAt(0) + ';');
  if (answer.started_instance_id) {
    const id = esc(answer.started_instance_id);
    return 'Started instance <a id="started" href="/instances/' + id + '">' + id + '</a>.';
  }
  if (answer.action && answer.done !== undefined) {
    const errs = answer.errors.map((e) => esc(e.instance_id) + ': ' + esc(e.error)).join('<br>');
    return esc(answer.action) + ': ' + answer.done + ' of ' + answer.count + ' done' +
      (answer.errors.length ? ', ' + answer.errors.length + ' refused:<br>' + errs : '.');
  }
  return 'Done' + (answer.outcome ? ': ' + esc(answer.outcome) : '') + (answer.status ? ' (now ' + esc(answer.status) + ')' : '') + '.';
}
async function confirmAction() {
  const d = document.getElementById('confirm');
  const ready = bodyOf(d);
  if (typeof ready === 'string') { d.querySelector('.err').textContent = ready; return; }
  busy = true;
  try {
    const [r, answer] = await post(ready[1], ready[0]);
    if (r.status === 401) { toSignIn(); return; }
    if (!r.ok) { d.querySelector('.err').textContent = answer.error || r.statusText; return; }
    d.close();
    notice(outcome(answer), answer.errors && answer.errors.length);
  } finally { busy = false; }
  refresh();
}
async function signIn(event) {
  event.preventDefault();
  const form = document.getElementById('signin');
  const useCert = event.submitter && event.submitter.id === 'signin-certificate';
  const body = useCert ? {certificate: true} : {token: form.querySelector('#token').value};
  body.next = form.dataset.next || '/instances';
  const [r, answer] = await post('/signin', body);
  if (!r.ok) { form.querySelector('.err').textContent = answer.error || r.statusText; return; }
  location.assign(answer.next);
}
async function signOut() {
  await post('/signout', {});
  location.assign('/signin');
}
function localFilters(form) {  // in local mode a typed date and time is the browser's: send it as UTC
  if (!isLocal()) return;
  for (const el of form.querySelectorAll('input.time')) {
    const v = el.value.trim();
    if (/^\\d{4}-\\d{2}-\\d{2}([ T]\\d{2}:\\d{2}(:\\d{2})?)?$/.test(v)) {
      const d = new Date(v.length === 10 ? v + 'T00:00' : v.replace(' ', 'T'));
      if (!isNaN(d)) el.value = d.toISOString();
    }
  }
}
document.addEventListener('click', (event) => {
  const target = event.target.closest('button');
  if (!target) return;
  if (target.dataset.url) act(target);
  else if (target.id === 'confirm-yes') confirmAction();
  else if (target.id === 'confirm-back') target.closest('dialog').close();
  else if (target.id === 'signout') signOut();
  else if (target.id === 'tz') { localStorage.setItem('wiggle-tz', isLocal() ? 'utc' : 'local'); showTimes(); updated(false); }
});
document.addEventListener('submit', (event) => {
  if (event.target.id === 'signin') signIn(event);
  else if (event.target.classList.contains('filters')) localFilters(event.target);
});
"""


def _version(*parts: str) -> str:
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:12]


#: changes whenever either file does: the pages ask for ``?v=VERSION``, so a cache never serves an old one
VERSION = _version(STYLE, SCRIPT)

#: path -> (body, content type)
ASSETS: dict[str, tuple[str, str]] = {
    "/static/dashboard.css": (STYLE, "text/css"),
    "/static/dashboard.js": (SCRIPT, "text/javascript"),
}
