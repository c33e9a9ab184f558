// vramscope web UI, the advice: the changes that make a job fit, one click applying one to the
// form (its controls outlined) with an undo.
"use strict";

// The report's advice (when the job does not fit): one row per change, cheapest first; a click
// applies it to the form.
function showAdvice(r) {
  const out = $("advice-out");
  if (!r.advice) { out.replaceChildren(); return; }
  const head = document.createElement("div");
  head.textContent = r.advice.length ? "Does not fit → do this (cheapest first; click to apply):"
                                     : "Does not fit, and no searched change fits: more GPUs, a larger GPU or a smaller model.";
  if (!r.advice.length) { out.replaceChildren(head); return; }
  const t = table("advice-table", ["change", "device", "free", "gives up"]);
  for (const a of r.advice) {
    const tr = t.tBodies[0].insertRow();
    const code = document.createElement("code"); code.className = "flags"; code.textContent = shownFlags(a.flags, a.env);
    tr.insertCell().append(code);
    cell(tr, human(a.device_total), true);
    cell(tr, human(a.headroom) + (a.headroom < GIB ? " (tight)" : ""), true);
    cell(tr, a.gives_up + (a.host_bytes ? ` · ${human(a.host_bytes)} in host RAM` : ""));
    tr.addEventListener("click", () => applyChanges(a.changes, shownFlags(a.flags, a.env)));
  }
  out.replaceChildren(head, t);
}

// What a change asks of the user: its environment first (NAME=value, set before the command),
// then the flags, less --alloc-conf (which only tells vramscope what the environment says).
function shownFlags(flags, env) {
  const parts = Object.entries(env || {}).map(([k, v]) => `${k}=${v}`);
  for (let i = 0; i < flags.length; i++) {
    if (flags[i] === "--alloc-conf" && parts.length) { i++; continue; }
    parts.push(flags[i]);
  }
  return parts.join(" ");
}

// A clicked piece of advice: its changes go into the form (each control it changed outlined, the
// fields without a control listed under "Other settings"), and a line says what was applied
// with an undo that brings the job before it back.
function applyChanges(changes, flags) {
  const before = jobFromForm();
  const job = Object.assign(jobFromForm(), changes);
  if (changes.parallel) job.parallel = Object.assign({}, before.parallel, changes.parallel);
  if (changes.engine) job.engine = Object.assign({}, before.engine || {}, changes.engine);
  formFromJob(job);
  markApplied(changes);
  $("applied-text").textContent = "Applied: " + flags;
  $("applied").hidden = false;
  undoJob = before;
  update();
}

// The job before the last applied advice (the undo's).
let undoJob = null;

function undoApplied() {
  if (!undoJob) return;
  formFromJob(undoJob);
  undoJob = null;
  markApplied(null);
  update();
}

// Outlines the controls (or "Other settings" rows) that `changes` set; null clears the marks and
// the applied line.
function markApplied(changes) {
  for (const el of document.querySelectorAll(".applied-change")) el.classList.remove("applied-change");
  if (!changes) { $("applied").hidden = true; undoJob = null; return; }
  const mark = (name, path) => {
    const ctl = name === "allocator" ? field("alloc_conf") : field(name);
    const el = ctl && (ctl.type === "checkbox" ? ctl.closest("label") : ctl);
    const row = document.querySelector(`#extras-list li[data-field="${path}"]`);
    for (const e of [el, row]) if (e) e.classList.add("applied-change");
  };
  for (const [k, v] of Object.entries(changes)) {
    if ((k === "parallel" || k === "engine") && v && typeof v === "object") {
      for (const sub of Object.keys(v)) mark(k === "parallel" ? sub : "", `${k}.${sub}`);
    } else if (k === "peft") { mark("peft", k); mark("rank", k); }
    else mark(k, k);
  }
}
