"""The dashboard's stylesheet and script, served as /static/dashboard.css and /static/dashboard.js.

The pages carry no inline script, style or event handler (the Content-Security-Policy forbids
them: wiggle/_server/web/errors.py CSP): buttons say what they do in ``data-*`` attributes and
this script listens for clicks on the document. It re-fetches the page's ``<main>`` every few
seconds, runs the actions (a dialog asks for confirmation and who is acting, then POSTs JSON with
the page's anti-forgery token), and signs in and out.

The refresh marks its requests ``X-Wiggle-Refresh: 1``: a background read that does not keep the
session alive (sessions.py), so a forgotten tab signs out at the idle timeout. It keeps what the
user typed, where they scrolled (the page and every scrolled box) and which boxes they opened or
closed. A refresh that fails shows the ``#stale`` banner ("server unreachable since 14:30:05Z —
figures are from then") until one succeeds. An action first checks the server answers at all, so
a failure can say whether the action was sent: not sent (no server), or sent with no answer
(may or may not have been done); a 401 says it was not sent before offering to sign in again.
"""

from __future__ import annotations

import hashlib

__all__ = ["STYLE", "SCRIPT", "ASSETS", "VERSION"]

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:10px 20px;display:flex;flex-wrap:wrap;gap:6px 22px;align-items:center}
header a{color:#cfd6e4;text-decoration:none}header a.on{color:#fff;font-weight:600}
header b{font-size:16px;margin-right:10px}main{padding:16px 20px}
header .who{color:#cfd6e4}header .who button{margin-left:8px}
table{border-collapse:collapse;background:#fff;margin:8px 0 18px;min-width:60%}
div.wide{max-width:100%;overflow-x:auto}div.wide>table{margin-bottom:10px}
th,td{border-bottom:1px solid #e3e6ec;padding:5px 9px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.num{text-align:right}code,pre{font:12px/1.35 ui-monospace,monospace}
pre{background:#fff;border:1px solid #e3e6ec;padding:8px;overflow:auto;max-height:420px}
pre.tb{background:#fff5f5;border-color:#f0c4c4;margin:4px 0}
.pill{display:inline-block;padding:1px 8px;border-radius:10px;background:#e3e6ec;margin-right:6px}
.RUNNING{background:#dbe9ff}.COMPLETED{background:#d9f2df}.FAILED{background:#fbdada}.CANCELLED{background:#eee}
form.filters input,form.filters select{margin-right:8px;max-width:100%}button{cursor:pointer}
svg.graph .node rect{fill:#fff;stroke:#8a93a6;stroke-width:1.5}
svg.graph text.name{font:600 12px system-ui}svg.graph text.sub{font:11px system-ui;fill:#4a5366}
svg.graph .done rect{fill:#d9f2df;stroke:#3c9a55}svg.graph .failed rect{fill:#fbdada;stroke:#c0392b}
svg.graph .retrying rect{fill:#fff0d6;stroke:#d68910}svg.graph .running rect{fill:#dbe9ff;stroke:#2e6bd1}
svg.graph .local-run rect{fill:#e8dcff;stroke:#7d4cdb}svg.graph .ready rect{fill:#fffbe0;stroke:#b7950b}
svg.graph .awaiting rect,svg.graph .sleeping rect,svg.graph .joined rect{fill:#e0f7fa;stroke:#117a8b}
svg.graph .scheduled rect,svg.graph .forked rect{fill:#e0f7fa;stroke:#117a8b;stroke-dasharray:4 3}
svg.graph .signal rect{fill:#fdf0ff;stroke:#8e44ad}svg.graph .child rect{fill:#eef3ff;stroke:#2e6bd1}
svg.graph a.node-link rect{stroke-width:2.2}svg.graph a.node-link:hover rect{fill:#dbe9ff}
header .clock{margin-left:auto;color:#cfd6e4;font-size:12px}header .clock button{margin-left:6px}
#notice{margin:10px 20px 0;padding:8px 12px;border-radius:6px;background:#d9f2df}#notice.err{background:#fbdada}
#stale{margin:10px 20px 0;padding:8px 12px;border-radius:6px;background:#fff0d6;border:1px solid #d68910;font-weight:600}
form.filters div{margin:4px 0}form.filters input.time{width:230px}form.filters input.ctx{width:200px}
.child-of{font-size:12px}td.times{white-space:nowrap;font-size:12px}
dialog{border:1px solid #8a93a6;border-radius:8px;padding:16px 18px;min-width:min(340px,80vw)}
dialog label{display:block;margin:8px 0}dialog input,dialog textarea{width:100%;box-sizing:border-box}
form.signin{background:#fff;border:1px solid #e3e6ec;border-radius:8px;padding:16px 18px;max-width:460px}
form.signin label{display:block;margin:8px 0}form.signin input{width:100%;box-sizing:border-box}
.err{color:#c0392b}.muted{color:#6b7385}.hidden{display:none}
td.lagging{background:#fbdada;font-weight:600}td.slots{white-space:nowrap}
@media (max-width:640px){header{padding:8px 12px;gap:4px 14px}header .clock{margin-left:0}main{padding:12px}
#notice,#stale{margin:8px 12px 0}
form.filters input.time,form.filters input.ctx{width:100%;box-sizing:border-box;margin-right:0}}
"""

SCRIPT = """
'use strict';
const main = () => document.getElementById('main');
const csrf = () => (document.querySelector('meta[name="wiggle-csrf"]') || {}).content || '';
// why a 401 says the session ended, without its "; sign in again at /signin" (access.py): the
// page offers that itself
const ended = (why) => String(why || '').replace(/;\\s*sign in again.*$/, '');
function toSignIn(why) {  // why the session ended: the sign-in page says it (#signed-out)
  if (why) sessionStorage.setItem('wiggle-signed-out', ended(why));
  location.assign('/signin?next=' + encodeURIComponent(location.pathname + location.search));
}
let busy = false;
let lastInput = 0;  // when the user last typed in the page (the refresh waits for a pause)
let lastContact = Date.now();  // when the server last answered a refresh (the page was served now)
let trouble = '';  // why the last refresh failed ('' it did not); the #stale banner says it
let refreshing = false;
// POST JSON: [response, answer]. No answer at all (the server is away, the connection broke):
// [null, {error}], never a rejected promise, so every caller says what happened.
async function post(url, body) {
  let r;
  try {
    r = await fetch(url, {method: 'POST', credentials: 'same-origin',
      headers: {'Content-Type': 'application/json', 'X-Wiggle-CSRF': csrf()}, body: JSON.stringify(body)});
  } catch (e) { return [null, {error: 'no answer from the server (' + e.message + ')'}]; }
  let answer = {};
  try { answer = await r.json(); } catch (e) { answer = {error: r.status + ' ' + r.statusText}; }
  return [r, answer];
}
// Whether the server answers at all (any status) within 10 s: asked before an action. A HEAD of a
// public file (access.py PUBLIC_PATHS): no session is looked up, so none is used or ended by it.
async function reachable() {
  const stop = new AbortController(), timer = setTimeout(() => stop.abort(), 10000);
  try {
    await fetch('/static/dashboard.js', {method: 'HEAD', cache: 'no-store', credentials: 'omit', signal: stop.signal});
    return true;
  } catch (e) { return false; } finally { clearTimeout(timer); }
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
const clockText = (ms) => (isLocal() ? localText(ms) : utcText(ms)).slice(11);  // 14:30:05Z
function showTimes() {
  const fmt = isLocal() ? localText : utcText;
  for (const t of document.querySelectorAll('time[data-ms]')) t.textContent = fmt(Number(t.dataset.ms));
  const tz = document.getElementById('tz');
  if (tz) tz.textContent = isLocal() ? 'local time' : 'UTC';
  showTrouble();
}
function updated(paused) {
  const u = document.getElementById('updated');
  if (!u) return;
  if (paused) { u.textContent = 'refresh paused while you type or select'; u.dataset.paused = '1'; return; }
  const ms = Date.now();
  u.dataset.paused = ''; u.dataset.ms = String(ms);
  u.textContent = 'updated ' + clockText(ms);
}
// ---- the banner of a failed refresh: the figures on the page are as old as the last answer
function showTrouble() {
  const b = document.getElementById('stale');
  if (!b) return;
  b.classList.toggle('hidden', !trouble);
  b.dataset.since = trouble ? String(lastContact) : '';
  if (!trouble) { b.textContent = ''; return; }
  b.textContent = (trouble === 'unreachable' ? 'server unreachable since ' + clockText(lastContact)
    : 'refresh failing since ' + clockText(lastContact) + ' (' + trouble + ')') + ' — figures are from then';
}
function refreshFailed(why) { trouble = why; showTrouble(); }
// ---- the refresh: keeps what the user typed, where they scrolled; waits while they type or select
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
function where(el) {  // a selector that finds el's counterpart in the refreshed <main>
  const path = [];
  for (let e = el; e && e !== main(); e = e.parentElement) {
    if (e.id) { path.unshift('#' + CSS.escape(e.id)); return path.join(' > '); }
    let n = 1;
    for (let s = e.previousElementSibling; s; s = s.previousElementSibling) if (s.tagName === e.tagName) n++;
    path.unshift(e.tagName.toLowerCase() + ':nth-of-type(' + n + ')');
  }
  return ':scope > ' + path.join(' > ');
}
function kept() {  // what the user did to the page's boxes: scrolled them, opened or closed them
  const out = [];
  for (const el of main().querySelectorAll('*')) {
    if (el.scrollTop || el.scrollLeft) out.push([where(el), 'scroll', el.scrollTop, el.scrollLeft]);
    if (el.tagName === 'DETAILS' && el.open !== el.hasAttribute('data-was-open')) out.push([where(el), 'open', el.open]);
  }
  return out;
}
function putBack(boxes) {
  for (const [selector, what, a, b] of boxes) {
    let el = null;
    try { el = main().querySelector(selector); } catch (e) { continue; }
    if (!el) continue;
    if (what === 'scroll') { el.scrollTop = a; el.scrollLeft = b; } else el.open = a;
  }
}
function markDetails() {  // how each <details> came from the server, to tell what the user changed
  for (const el of main().querySelectorAll('details')) el.toggleAttribute('data-was-open', el.open);
}
function swap(html) {  // the new <main>, with the user's typing, scrolling and open boxes kept
  const values = typed(), boxes = kept(), x = window.scrollX, y = window.scrollY;
  main().innerHTML = html;
  markDetails(); restore(values); putBack(boxes);
  if (window.scrollX !== x || window.scrollY !== y) window.scrollTo(x, y);
  showTimes(); updated(false);
  main().dataset.refreshed = String(Date.now());
}
async function refresh() {
  if (!main() || main().dataset.page === 'signin' || busy || refreshing || document.querySelector('dialog[open]')) return;
  if (userIsBusy()) { updated(true); return; }
  refreshing = true;
  const stop = new AbortController(), timer = setTimeout(() => stop.abort(), 10000);
  try {
    // X-Wiggle-Refresh: a background read, which does not keep the session alive (sessions.py)
    const r = await fetch(location.href, {headers: {'X-Fragment': '1', 'X-Wiggle-Refresh': '1'},
      credentials: 'same-origin', cache: 'no-store', signal: stop.signal});
    if (r.status === 401) {
      let why = '';
      try { why = (await r.json()).error || ''; } catch (e) { /* no reason given */ }
      toSignIn(why); return;
    }
    if (!r.ok) {
      let why = r.status + ' ' + r.statusText;
      try { why = (await r.json()).error || why; } catch (e) { /* a proxy's page, not ours */ }
      refreshFailed(r.status >= 502 && r.status <= 504 ? 'unreachable' : why); return;
    }
    const html = await r.text();
    lastContact = Date.now(); refreshFailed('');
    if (!userIsBusy()) swap(html);
  } catch (e) {
    refreshFailed('unreachable');  // no answer, or none within 10 s: try again at the next tick
  } finally { clearTimeout(timer); refreshing = false; }
}
setInterval(refresh, 2000);
document.addEventListener('input', (e) => { if (main() && main().contains(e.target)) lastInput = Date.now(); });
document.addEventListener('DOMContentLoaded', () => {
  if (main()) markDetails();
  showTimes(); updated(false);
  const out = document.getElementById('signed-out'), why = sessionStorage.getItem('wiggle-signed-out');
  if (out && why) { out.textContent = 'You were signed out: ' + why; show(out, true); }
  sessionStorage.removeItem('wiggle-signed-out');
});
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
function sessionEnded(d, why) {  // a 401: nothing was done; say so before going to sign in
  d.querySelector('.err').textContent = 'The action was not sent: your session has ended' +
    (why ? ' (' + ended(why) + ')' : '') + '. Sign in again, then repeat it.';
  d.dataset.why = why || '';
  show(d.querySelector('#confirm-yes'), false);
  show(d.querySelector('#confirm-signin'), true);
}
async function countBulk(d) {
  const count = d.querySelector('.count');
  count.textContent = 'counting what the filter matches…'; d.dataset.expected = '';
  const [r, answer] = await post(d.dataset.url, {dry_run: true});
  if (!r) { count.textContent = 'The server could not be reached: nothing was counted, and nothing done.'; return; }
  if (r.status === 401) { count.textContent = ''; sessionEnded(d, answer.error); return; }
  if (!r.ok) { count.textContent = answer.error || r.statusText; return; }
  d.dataset.expected = String(answer.count);
  count.textContent = answer.count + ' instance' + (answer.count === 1 ? '' : 's') + ' will be ' +
    (d.dataset.kind === 'bulk-cancel' ? 'cancelled' : 'retried') + '.';
}
function act(button) {
  const d = document.getElementById('confirm');
  d.querySelector('.what').textContent = button.dataset.what;
  const k = button.dataset.kind;
  if (d.dataset.url !== button.dataset.url || d.dataset.kind !== k) {  // another action: empty fields
    d.querySelector('#reason').value = ''; d.querySelector('#data').value = '';
  }
  show(d.querySelector('#data-row'), k === 'task' || k === 'signal');
  show(d.querySelector('#name-row'), k === 'signal');
  show(d.querySelector('#reason-row'), k === 'cancel' || k === 'bulk-cancel');
  show(d.querySelector('#from-row'), k === 'retry');
  show(d.querySelector('.count'), k.startsWith('bulk'));
  show(d.querySelector('#confirm-yes'), true);
  show(d.querySelector('#confirm-signin'), false);
  d.querySelector('#reason').placeholder = button.dataset.reason || '';  // what an empty reason records
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
  if (k === 'cancel' || k === 'bulk-cancel') {
    const reason = d.querySelector('#reason').value.trim();
    if (reason) body.reason = reason;  // empty: the server's default, which the placeholder shows
  }
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
    try { body.data = JSON.parse(d.querySelector('#data').value.trim() || '{}'); }
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
    const skipped = (answer.skipped || []).length;  // finished before their turn (a cascade)
    return esc(answer.action) + ': ' + answer.done + ' of ' + answer.count + ' done' +
      (skipped ? ', ' + skipped + ' already finished' : '') +
      (answer.errors.length ? ', ' + answer.errors.length + ' refused:<br>' + errs : '.');
  }
  return 'Done' + (answer.outcome ? ': ' + esc(answer.outcome) : '') + (answer.status ? ' (now ' + esc(answer.status) + ')' : '') + '.';
}
function refused(r, answer) {  // a refusal's words: the server's own, or a proxy's status
  if (answer.code) return answer.error;  // the server answered, and says what it did not do
  return 'The server (or a proxy in front of it) answered ' + r.status + ' ' + r.statusText +
    ': the action may not have been carried out. Look at the page again before you repeat it.';
}
async function confirmAction() {
  const d = document.getElementById('confirm');
  if (busy) return;
  const err = d.querySelector('.err'), yes = d.querySelector('#confirm-yes');
  const ready = bodyOf(d);
  if (typeof ready === 'string') { err.textContent = ready; return; }
  busy = true; yes.disabled = true; err.textContent = '';
  try {
    if (!await reachable()) {
      err.textContent = 'The server could not be reached: the action was not sent. Try again when it is back.';
      refreshFailed('unreachable'); return;
    }
    const [r, answer] = await post(ready[1], ready[0]);
    if (!r) {
      err.textContent = 'The server could not be reached: the action was sent but no answer came back, so it ' +
        'may or may not have been carried out. Look at the page again once the server answers before you repeat it.';
      return;
    }
    if (r.status === 401) { sessionEnded(d, answer.error); return; }
    if (!r.ok) { err.textContent = refused(r, answer); return; }
    d.close();
    d.dataset.url = '';  // done: the next dialog starts with empty fields
    notice(outcome(answer), answer.errors && answer.errors.length);
  } finally { busy = false; yes.disabled = false; }
  refresh();
}
async function signIn(event) {
  event.preventDefault();
  const form = document.getElementById('signin');
  const useCert = event.submitter && event.submitter.id === 'signin-certificate';
  const body = useCert ? {certificate: true} : {token: form.querySelector('#token').value};
  body.next = form.dataset.next || '/instances';
  const [r, answer] = await post('/signin', body);
  if (!r) { form.querySelector('.err').textContent = 'The server could not be reached: not signed in. Try again.'; return; }
  if (!r.ok) { form.querySelector('.err').textContent = answer.error || r.statusText; return; }
  location.assign(answer.next);
}
async function signOut() {
  const [r] = await post('/signout', {});
  if (!r) { notice('The server could not be reached: you are still signed in. Sign out again when it is back.', true); return; }
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
  else if (target.id === 'confirm-signin') toSignIn(target.closest('dialog').dataset.why);
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
