// vramscope web UI, the fit panel: the largest batch (and sequence or context) on the GPU, its
// modelled speed and the engine's launch line.
"use strict";

async function fit(opts) {
  const out = $("fit-out");
  shown.add("fit");
  const at = seq;
  try {
    const job = jobFromForm();
    if (!job.gpu) { out.textContent = "Choose a GPU to fit."; return; }
    out.textContent = "searching…";
    const a = JSON.parse(await post("/api/fit", job));
    const show = (n) => (n == null ? "none (even 1 does not fit)" : thousands(n));
    if (isPipelineJob(job)) {
      if (at !== seq) return;
      out.replaceChildren(...pipelineFitLines(a, job).map((l) => { const d = document.createElement("div"); d.textContent = l; return d; }));
      reveal(out, opts);
      return;
    }
    const lines = [`Fit on ${a.gpu} (${human(a.capacity)}):`, `largest batch: ${show(a.max_batch)}`];
    if ("max_seq" in a) lines.push(`longest sequence at batch ${job.batch}: ${show(a.max_seq)}`);
    if ("max_context" in a) lines.push(`longest context at batch ${job.batch}: ${show(a.max_context)}`);
    const speed = fitSpeed(a);
    if (speed) lines.push(speed);
    if (at !== seq) return; // the job changed meanwhile
    const parts = lines.map((l) => { const d = document.createElement("div"); d.textContent = l; return d; });
    parts.push(...launchLines(a.launch));
    for (const n of a.notes) { const d = document.createElement("div"); d.textContent = n; parts.push(d); }
    out.replaceChildren(...parts);
    reveal(out, opts);
  } catch (e) { out.textContent = "fit: " + e.message; }
}

// The fit's modelled speed at its largest batch, as the CLI prints it; "" without one.
function fitSpeed(a) {
  const t = a.throughput_at_max_batch;
  if (!t || a.max_batch == null) return "";
  const n = (x) => thousands(Math.round(x));
  if (t.tokens_per_s_per_gpu != null) {
    const mfu = t.mfu != null ? `MFU ${(100 * t.mfu).toFixed(0)} %, ` : "";
    return `at micro-batch ${thousands(a.max_batch)}: ${t.step_time_s.toFixed(2)} s per step, ${n(t.tokens_per_s_per_gpu)} tokens/s per GPU (${mfu}modelled)`;
  }
  if (t.decode_tokens_per_s != null) {
    return `at ${thousands(a.max_batch)} sequences: prefill ${n(t.prefill_tokens_per_s)} tokens/s, decode ${n(t.decode_tokens_per_s)} tokens/s (modelled)`;
  }
  return "";
}

// The engine's own command line for the fit's answer (`fit.launch`), to copy, with why each flag
// has its value.
function launchLines(l) {
  if (!l || !l.command) return [];
  const head = document.createElement("div");
  head.textContent = `launch (${l.engine}):`;
  const code = document.createElement("code");
  code.id = "fit-launch";
  code.textContent = l.command;
  const parts = [head, code];
  for (const [flag, why] of Object.entries(l.why || {})) {
    const d = document.createElement("div"); d.className = "why"; d.textContent = `${flag}: ${why}`;
    parts.push(d);
  }
  return parts;
}
