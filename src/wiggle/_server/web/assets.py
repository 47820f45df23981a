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
header .who{margin-left:auto;color:#cfd6e4}header .who button{margin-left:8px}
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
dialog{border:1px solid #8a93a6;border-radius:8px;padding:16px 18px;min-width:340px}
dialog label{display:block;margin:8px 0}dialog input,dialog textarea{width:100%;box-sizing:border-box}
form.signin{background:#fff;border:1px solid #e3e6ec;border-radius:8px;padding:16px 18px;max-width:460px}
form.signin label{display:block;margin:8px 0}form.signin input{width:100%;box-sizing:border-box}
.err{color:#c0392b}.muted{color:#6b7385}.hidden{display:none}
td.lagging{background:#fbdada;font-weight:600}
"""

SCRIPT = """
'use strict';
const main = () => document.getElementById('main');
const csrf = () => (document.querySelector('meta[name="wiggle-csrf"]') || {}).content || '';
const toSignIn = () => location.assign('/signin?next=' + encodeURIComponent(location.pathname + location.search));
let busy = false;
async function post(url, body) {
  const r = await fetch(url, {method: 'POST', credentials: 'same-origin',
    headers: {'Content-Type': 'application/json', 'X-Wiggle-CSRF': csrf()}, body: JSON.stringify(body)});
  let answer = {};
  try { answer = await r.json(); } catch (e) { answer = {error: r.statusText}; }
  return [r, answer];
}
async function refresh() {
  if (!main() || main().dataset.page === 'signin' || busy || document.querySelector('dialog[open]')) return;
  try {
    const r = await fetch(location.href, {headers: {'X-Fragment': '1'}, credentials: 'same-origin'});
    if (r.status === 401) { toSignIn(); return; }
    if (r.ok) { main().innerHTML = await r.text(); main().dataset.refreshed = String(Date.now()); }
  } catch (e) { /* the server is away: try again at the next tick */ }
}
setInterval(refresh, 2000);
function show(el, on) { el.classList.toggle('hidden', !on); }
function act(button) {
  const d = document.getElementById('confirm');
  d.querySelector('.what').textContent = button.dataset.what;
  const k = button.dataset.kind;
  show(d.querySelector('#data-row'), k === 'task' || k === 'signal');
  show(d.querySelector('#name-row'), k === 'signal');
  show(d.querySelector('#reason-row'), k === 'cancel');
  d.querySelector('#actor').value = localStorage.getItem('wiggle-actor') || '';
  d.querySelector('.err').textContent = '';
  d.dataset.url = button.dataset.url; d.dataset.kind = k;
  d.showModal();
}
async function confirmAction() {
  const d = document.getElementById('confirm');
  const actor = d.querySelector('#actor').value.trim();
  if (!actor) { d.querySelector('.err').textContent = 'Say who you are: it goes in the history.'; return; }
  localStorage.setItem('wiggle-actor', actor);
  const body = {actor};
  if (d.dataset.kind === 'cancel') body.reason = d.querySelector('#reason').value;
  let url = d.dataset.url;
  if (d.dataset.kind === 'signal') {
    const name = d.querySelector('#signal-name').value.trim();
    if (!name) { d.querySelector('.err').textContent = 'Name the signal to send.'; return; }
    url += encodeURIComponent(name);
  }
  if (d.dataset.kind === 'task' || d.dataset.kind === 'signal') {
    try { body.data = JSON.parse(d.querySelector('#data').value || '{}'); }
    catch (e) { d.querySelector('.err').textContent = 'data is not valid JSON: ' + e.message; return; }
  }
  busy = true;
  try {
    const [r, answer] = await post(url, body);
    if (r.status === 401) { toSignIn(); return; }
    if (!r.ok) { d.querySelector('.err').textContent = answer.error || r.statusText; return; }
    d.close();
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
document.addEventListener('click', (event) => {
  const target = event.target.closest('button');
  if (!target) return;
  if (target.dataset.url) act(target);
  else if (target.id === 'confirm-yes') confirmAction();
  else if (target.id === 'confirm-back') target.closest('dialog').close();
  else if (target.id === 'signout') signOut();
});
document.addEventListener('submit', (event) => { if (event.target.id === 'signin') signIn(event); });
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
