// vramscope web UI, diffusion pipelines: when the model (a Hub id, or a directory on a loopback
// server) is a diffusers pipeline — /api/inspect answers with its `pipeline` class — the form
// asks the pipeline's fields (size, images, dtype, guidance, offload, VAE tiling/slicing) and
// the answer shows the call's phases (text encoders, denoise, VAE decode). Loaded before app.js,
// which calls these functions.
"use strict";

// The pipeline the model names (inspect's answer), or null for a model.
let pipelineInfo = null;

function isPipeline() { return pipelineInfo !== null; }

// The detection under way: an estimate asked meanwhile waits for it, and one asked for a model
// box whose text changed since (Enter may submit the form before its "change") asks first,
// so the job is sent with the right fields.
let detecting = null;
// The model box's text the mode was last asked for.
let detectedFor = "";

// Asks /api/inspect whether `model` is a pipeline; switches the form's mode. Errors leave the
// mode as a model's (the estimate then says what is wrong with the model).
function detectPipeline(model) {
  detectedFor = model;
  detecting = detectNow(model);
  return detecting;
}

async function detectNow(model) {
  let info = null;
  if (model) {
    try {
      const a = JSON.parse(await post("/api/inspect", { model }));
      if (a && typeof a.pipeline === "string") info = a;
    } catch (_) { /* not a pipeline, or unreadable: the estimate will say */ }
  }
  setPipeline(info);
}

function setPipeline(info) {
  pipelineInfo = info;
  document.body.dataset.kind = info ? "pipeline" : "model";
  for (const el of document.querySelectorAll(".lm")) el.hidden = !!info;
  if (info) { shown.delete("whatif"); shown.delete("plan"); }
  $("pipeline-fields").hidden = !info;
  if (info) {
    const models = info.components.map((c) => `${c.name} (${c.class}, ${thousands(c.params)})`);
    $("pipeline-about").textContent = `${info.pipeline}: ${models.join(", ")}`;
  }
}

// The diffusion job the pipeline fields describe (docs/diffusion.md's names).
function pipelineJob(model) {
  const f = (n) => field(n).value;
  const job = { model, width: Number(f("width")), height: Number(f("height")),
                batch: Number(f("images")), precision: f("p_precision"), offload: f("p_offload"),
                attention: f("p_attention"), vae_tiling: field("vae_tiling").checked,
                vae_slicing: field("vae_slicing").checked };
  if (f("cfg")) job.cfg = f("cfg") === "on";
  if (f("max_sequence_length").trim()) job.max_sequence_length = Number(f("max_sequence_length"));
  if (field("drop_t5").checked) job.drop_t5 = true;
  job.gpu = f("gpu") || null;
  const reserve = Number(f("reserve"));
  if (reserve > 0) job.reserve = Math.round(reserve * 1073741824);
  return job;
}

// A pipeline job from a link: its fields into the form.
function pipelineFormFromJob(job) {
  const set = (n, v) => { if (v !== undefined && v !== null) field(n).value = v; };
  set("width", job.width); set("height", job.height); set("images", job.batch);
  set("p_precision", job.precision); set("p_offload", job.offload); set("p_attention", job.attention);
  set("cfg", job.cfg === undefined ? "" : (job.cfg ? "on" : "off"));
  set("max_sequence_length", job.max_sequence_length);
  field("vae_tiling").checked = !!job.vae_tiling;
  field("vae_slicing").checked = !!job.vae_slicing;
  field("drop_t5").checked = !!job.drop_t5;
}

// A job is a pipeline's when it has the pipeline's own fields.
function isPipelineJob(job) { return job.width !== undefined || job.height !== undefined; }

// The report of a pipeline: the summary, the phases (the peak's marked), the breakdown.
function showPipelineReport(r) {
  $("picture").replaceChildren();
  const t = table("phases-table", ["phase", "weights", "activations", "workspaces", "allocated"]);
  const top = Math.max(...r.phases.map((p) => p.allocated), 1);
  for (const p of r.phases) {
    const tr = t.tBodies[0].insertRow();
    tr.dataset.phase = p.phase;
    if (p.phase === r.per_gpu.peak_phase) tr.className = "peak-phase";
    const name = tr.insertCell();
    const bar = document.createElement("span");
    bar.className = "phase-bar";
    bar.style.width = `${Math.round((60 * p.allocated) / top)}px`;
    name.append(bar, p.phase);
    for (const k of ["parameters", "activations", "temporaries", "allocated"]) {
      const c = cell(tr, human(p[k]), true); c.title = thousands(p[k]) + " bytes";
    }
  }
  const head = document.createElement("h2");
  head.textContent = `Phases of one call (${r.job.width}×${r.job.height}, ${r.job.batch} image${r.job.batch > 1 ? "s" : ""}, ${r.job.precision}, offload ${r.job.offload}); peak in ${r.per_gpu.peak_phase}`;
  $("phases").replaceChildren(head, t);
}

// fit of a pipeline: the most images at the size, the largest square side at the batch.
function pipelineFitLines(a, job) {
  const show = (n, unit) => (n == null ? "none (even the smallest does not fit)" : thousands(n) + unit);
  return [`Fit on ${a.gpu} (${human(a.capacity)}):`,
          `most images at ${job.width}×${job.height}: ${show(a.max_batch, "")}`,
          `largest square side at ${job.batch} image${job.batch > 1 ? "s" : ""}: ${show(a.max_resolution, " px")} (steps of ${a.side_step} px)`,
          ...a.notes];
}

// Before an estimate: the mode for the model box's current text.
async function pipelineModeNow() {
  if (detecting) await detecting;
  const hub = $("hub").value.trim();
  if (hub !== detectedFor) await detectPipeline(hub);
}
