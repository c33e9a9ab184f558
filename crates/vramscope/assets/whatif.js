// vramscope web UI, the what-if panel: each change's device total, saving and time cost.
"use strict";

// A what-if row's time cost as the CLI's table prints it: a signed percentage ("+33 %", "−12 %",
// "0 %" under half a percent), "-" when unknown.
function timeCost(c) {
  if (c == null) return "-";
  if (Math.abs(c) < 0.005) return "0 %";
  return `${c < 0 ? "−" : "+"}${(100 * Math.abs(c)).toFixed(0)} %`;
}

async function whatIf(opts) {
  const out = $("whatif-out");
  shown.add("whatif");
  const at = seq;
  try {
    const rows = JSON.parse(await post("/api/whatif", jobFromForm()));
    const t = table("whatif-table", ["what if (flags)", "device", "saved", "fits", "time", "step"]);
    for (const w of rows) {
      const tr = t.tBodies[0].insertRow();
      tr.title = w.technique;
      const code = document.createElement("code"); code.className = "flags"; code.textContent = shownFlags(w.flags, w.env);
      tr.insertCell().append(code);
      cell(tr, human(w.device_total), true);
      cell(tr, w.saved == null ? "n/a" : (w.saved >= 0 ? "+" : "") + human(w.saved), true);
      cell(tr, w.fits == null ? "-" : (w.fits ? "yes" : "no"), true);
      cell(tr, timeCost(w.time_cost), true).title = "the change's modelled time per token against this job's (− is faster)";
      cell(tr, w.step_time_s == null ? "-" : `${w.step_time_s.toFixed(2)} s`, true);
    }
    if (at !== seq) return; // the job changed meanwhile
    const foot = document.createElement("div");
    foot.className = "foot";
    foot.textContent = "saved = this job's device total minus the change's; time = the change's modelled time per token against this job's (− is faster); step = its modelled training step";
    out.replaceChildren(t, foot);
    reveal(out, opts);
  } catch (e) { out.textContent = "what-if: " + e.message; }
}
