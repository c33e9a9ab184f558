// vramscope web UI, the plan panel: parallel layouts of a training job over its GPUs, ranked.
"use strict";

// Parallel layouts of a training job over its GPUs (`plan --json`): the best ranked, and the
// best of each framework.
async function plan(opts) {
  const out = $("plan-out");
  shown.add("plan");
  const at = seq;
  try {
    const job = jobFromForm();
    if (!job.gpu) { out.textContent = "Choose a GPU to plan."; return; }
    if (job.task !== "train") { out.textContent = "plan searches training layouts (task train)."; return; }
    out.textContent = "planning…";
    const r = JSON.parse(await post("/api/plan", job));
    const head = document.createElement("div");
    head.textContent = `Plan on ${r.gpus} × ${r.gpu}: ${r.fitting} of ${r.evaluated} layouts fit`;
    const parts = [head];
    const rows = planRows(r.best.slice(0, 5), r.best_per_framework || []);
    if (rows.length) {
      const t = table("plan-table", ["rank", "framework", "dp·tp·pp·cp", "zero", "offload", "ckpt", "micro-batch",
                                     "device", "host/GPU", "step", "tok/s/GPU", "bound by"]);
      t.tHead.rows[0].cells[0].className = "rank";
      for (const { c, label } of rows) {
        const l = c.layout; const tr = t.tBodies[0].insertRow();
        cell(tr, label).className = "rank";
        cell(tr, l.framework); cell(tr, `${l.dp}·${l.tp}·${l.pp}·${l.cp}`); cell(tr, String(l.zero));
        cell(tr, l.offload); cell(tr, l.checkpointing); cell(tr, String(l.micro_batch), true);
        const confirmed = c.estimate && c.estimate.device_total;
        cell(tr, human(confirmed != null ? confirmed : c.device_total), true);
        cell(tr, c.host_bytes ? human(c.host_bytes) : "-", true);
        cell(tr, c.time ? `${c.time.step_time_s.toFixed(2)} s` : "-", true);
        cell(tr, c.time ? thousands(Math.round(c.time.tokens_per_s_per_gpu)) : "-", true);
        cell(tr, c.time ? c.time.dominant : "-");
      }
      parts.push(t);
    }
    if (r.why) { const d = document.createElement("div"); d.textContent = "why the first: " + r.why; parts.push(d); }
    for (const a of r.advice || []) { const d = document.createElement("div"); d.textContent = a; parts.push(d); }
    const foot = document.createElement("div");
    foot.className = "foot";
    foot.textContent = r.why ? "ranked by modelled tokens per second per GPU (ties: more headroom), as `vramscope plan`"
                             : "ranked by least recomputation, pipeline bubble, tensor-parallel degree and communication, then the largest micro-batch (no speeds for this GPU), as `vramscope plan`";
    parts.push(foot);
    if (at !== seq) return; // the job changed meanwhile
    out.replaceChildren(...parts);
    reveal(out, opts);
  } catch (e) { out.textContent = "plan: " + e.message; }
}

// The plan's rows: the best layouts ranked 1, 2, ...; each framework's best labelled on its row
// when it is one of those, else added below as "best of <framework>" (never the same layout
// twice).
function planRows(best, perFramework) {
  const key = (c) => JSON.stringify(c.layout);
  const rows = best.map((c, i) => ({ c, label: String(i + 1) }));
  for (const c of perFramework) {
    const same = rows.find((row) => key(row.c) === key(c));
    // The families `plan` names: each framework, DeepSpeed with offload apart.
    const family = c.layout.framework + (c.layout.offload !== "none" ? " with offload" : "");
    if (same) same.label += ` · best of ${family}`;
    else rows.push({ c, label: `best of ${family}` });
  }
  return rows;
}
