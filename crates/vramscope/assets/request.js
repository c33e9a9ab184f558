// vramscope web UI, the requests: every change of the job posts it to /api/estimate and
// /api/picture (after a short pause), drops answers to older requests, asks the answers on
// show again, and keeps the job in the URL's hash.
"use strict";

let seq = 0; // answers to older requests are dropped
let timer = null;
// The job (and measurement) last sent: a "change" event that repeats it (a field losing focus
// after its "input" events were already sent) asks nothing again and keeps the answers shown.
let lastKey = null;
// Answers on show (fit, what-if, plan): cleared on every job change and asked again.
const shown = new Set();

async function post(path, job) {
  const resp = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" },
                                   body: JSON.stringify(job) });
  const text = await resp.text();
  if (!resp.ok) {
    let msg = text;
    try { msg = JSON.parse(text).error; } catch (_) { /* keep the text */ }
    throw new Error(msg);
  }
  return text;
}

function shareLink(job) {
  const hash = "#job=" + encodeURIComponent(JSON.stringify(job));
  $("share").href = hash;
  history.replaceState(null, "", hash);
}

async function update() {
  await pipelineModeNow();
  let job;
  try { job = jobFromForm(); } catch (e) { status(e.message); return; }
  shareLink(job);
  const key = JSON.stringify(job) + "#" + (measured ? measuredId : 0);
  if (key === lastKey) return;
  lastKey = key;
  const mine = ++seq;
  // Answers to the old job go at once; those on show are asked again below.
  for (const id of ["advice-out", "fit-out", "whatif-out", "plan-out"]) $(id).replaceChildren();
  const hub = typeof job.model === "string" && job.model === $("hub").value.trim() ? job.model : "";
  status(hub ? `fetching ${hub} (config and headers)…` : "estimating…", true);
  $("hub-error").hidden = true;
  document.body.dataset.state = "busy";
  try {
    // A pipeline's answer is its phases (pipeline.js), not the training picture.
    const picture = isPipelineJob(job) ? Promise.resolve("")
                  : measured ? post("/api/compare?picture=svg", { job, analysis: measured })
                  : post("/api/picture", job);
    const [reportText, svg] = await Promise.all([post("/api/estimate", job), picture]);
    if (mine !== seq) return;
    showReport(JSON.parse(reportText), svg);
    status("");
    document.body.dataset.state = "ready";
    const again = { fit, whatif: whatIf, plan };
    for (const k of shown) again[k]({ scroll: false });
  } catch (e) {
    if (mine !== seq) return;
    lastKey = null; // the same job may be asked again (a Hub fetch that failed, say)
    clearReport(e.message); // the verdict says why
    status("");
    if (hub) { $("hub-error").textContent = e.message; $("hub-error").hidden = false; }
    document.body.dataset.state = "error";
  }
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(update, 150);
}
