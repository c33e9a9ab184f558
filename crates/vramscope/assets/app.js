// vramscope web UI: the form is the job; every change posts it to /api/estimate (numbers and
// table) and /api/picture (the SVG that `estimate --svg` writes) and shows both. The job lives
// in the URL's hash (#job=<JSON>) so a link reproduces the view. No library, no other origin.
"use strict";

const GIB = 1024 ** 3;
const form = document.getElementById("job");
const $ = (id) => document.getElementById(id);
let seq = 0; // answers to older requests are dropped
let timer = null;
let measured = null; // analyze's JSON for a dropped measurement, overlaid on the picture
let measuredId = 0; // bumped whenever `measured` changes
// The job (and measurement) last sent: a "change" event that repeats it (a field losing focus
// after its "input" events were already sent) asks nothing again and keeps the answers shown.
let lastKey = null;
// Job fields the form has no control for (engine settings, the loss kernel), kept from a link or
// an applied piece of advice.
let extras = {};
// Answers on show (fit, what-if, plan): cleared on every job change and asked again.
const shown = new Set();

function gib(b) { return b == null ? "n/a" : (b / GIB).toFixed(2); }
// Adaptive binary units, as the CLI prints them (`14.96 GiB`, `500.0 MiB`, `512 B`).
function human(b) {
  if (b == null) return "n/a";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Math.abs(b), u = 0;
  if (v < 1024) return `${b} B`;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u += 1; }
  return `${b < 0 ? "−" : ""}${v.toFixed(v >= 100 ? 1 : 2)} ${units[u]}`;
}
function thousands(b) { return b == null ? "n/a" : String(b).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
function field(name) { return form.elements[name]; }

// Choosing an older PyTorch sets the fields whose defaults that release changes (the job's
// own rule, core/src/job/torch_version.rs): eager kernels before 1.13; zeroed gradients and
// no SDPA before 2.0. The user can still change each one afterwards.
function applyTorchDefaults() {
  const v = field("torch_version").value;
  if (!v) return;
  const [major, minor] = v.split(".").map(Number);
  const before = (a, b) => major < a || (major === a && minor < b);
  field("cuda_module_loading").value = before(1, 13) ? "eager" : "lazy";
  field("zero_grad").value = before(2, 0) ? "zeros" : "none";
  if (before(2, 0) && field("attention").value === "sdpa") field("attention").value = "eager";
}
function num(name) { return Number(field(name).value); }

// The job the form describes, in the contract's field names.
function jobFromForm() {
  const job = {};
  const cfg = $("config").value.trim();
  if (cfg) {
    try { job.model = { hf_config: JSON.parse(cfg) }; }
    catch (e) { throw new Error("config.json: " + e.message); }
  } else {
    job.model = $("hub").value.trim() || field("model").value;
  }
  // A diffusers pipeline (pipeline.js) has its own fields.
  if (isPipeline() && job.model === $("hub").value.trim()) return pipelineJob(job.model);
  const task = field("task").value;
  job.task = task;
  job.batch = num("batch");
  // An empty sequence is the CLI's default: min(2048, the model's maximum positions). An RL
  // step's sequence is its rl.prompt_len + rl.completion_len.
  if (field("seq").value.trim() && task !== "rl") job.seq = num("seq");
  if (task === "train" || task === "rl") {
    job.grad_accum = num("grad_accum");
    if (field("optimizer").value) job.optimizer = field("optimizer").value;
    job.checkpointing = field("checkpointing").value;
    // Sent only when not the default, so a default job is the same job as before these fields.
    if (field("zero_grad").value !== "none") job.zero_grad = field("zero_grad").value;
    if (field("optimizer_impl").value !== "foreach") job.optimizer_impl = field("optimizer_impl").value;
  } else {
    job.new_tokens = num("new_tokens");
    if (field("kv_dtype").value) job.kv_dtype = field("kv_dtype").value;
  }
  if (field("precision").value) job.precision = field("precision").value;
  job.attention = field("attention").value;
  job.cuda_module_loading = field("cuda_module_loading").value;
  if (field("torch_version").value) job.torch_version = field("torch_version").value;
  if (field("peft").value) {
    job.peft = { method: field("peft").value, rank: num("rank"), alpha: 2 * num("rank"),
                 targets: ["q_proj", "k_proj", "v_proj", "o_proj"] };
  }
  if (field("weights").value.trim()) job.weights = field("weights").value.trim();
  job.framework = field("framework").value;
  job.parallel = { gpus: num("gpus"), tp: num("tp"), pp: num("pp"), zero: num("zero"),
                   offload: field("offload").value };
  job.gpu = field("gpu").value || null;
  // The contract's reserve is bytes; the form asks GiB, as the CLI's --reserve does.
  const reserve = Number(field("reserve").value);
  if (reserve > 0) job.reserve = Math.round(reserve * 1073741824);
  // The caching allocator's settings in PYTORCH_CUDA_ALLOC_CONF's syntax (the contract's
  // `allocator` takes that string); sent only when set, so a default job is unchanged.
  if (field("alloc_conf").value.trim()) job.allocator = field("alloc_conf").value.trim();
  Object.assign(job, extras);
  if (task !== "rl") delete job.rl;
  return job;
}

// Sets the form from a job (the URL's hash); unknown fields are ignored.
function formFromJob(job) {
  const set = (name, v) => { if (v !== undefined && v !== null && field(name)) field(name).value = v; };
  const isHub = (m) => !m.startsWith("upload:") && (/^(hf:\/\/|https?:\/\/)/.test(m) || m.includes("/"));
  if (typeof job.model === "string" && isHub(job.model) &&
      ![...field("model").options].some((o) => o.value === job.model)) {
    $("hub").value = job.model; $("config").value = "";
  }
  else if (typeof job.model === "string") {
    if (![...field("model").options].some((o) => o.value === job.model)) {
      field("model").add(new Option(job.model, job.model), 0); // e.g. an upload's id
    }
    set("model", job.model); $("config").value = "";
  }
  else if (job.model && job.model.hf_config) {
    $("config").value = JSON.stringify(job.model.hf_config, null, 1);
    $("paste").open = true;
  }
  for (const k of ["task", "batch", "seq", "grad_accum", "new_tokens", "precision", "optimizer",
                   "checkpointing", "attention", "weights", "framework", "kv_dtype",
                   "cuda_module_loading"]) set(k, job[k]);
  set("zero_grad", job.zero_grad || "none");
  set("torch_version", job.torch_version || "");
  set("optimizer_impl", job.optimizer_impl || "foreach");
  if (job.peft) { set("peft", job.peft.method); set("rank", job.peft.rank); }
  const p = job.parallel || {};
  for (const k of ["gpus", "tp", "pp", "zero", "offload"]) set(k, p[k]);
  field("gpu").value = job.gpu || "";
  field("reserve").value = job.reserve ? job.reserve / 1073741824 : 0;
  field("alloc_conf").value = allocConf(job.allocator);
  if (!job.peft) set("peft", "");
  extras = {};
  for (const k of ["engine", "loss", "rl"]) if (job[k] != null) extras[k] = job[k];
  if (isPipelineJob(job)) pipelineFormFromJob(job);
  showTaskFields();
}

function showTaskFields() {
  const train = field("task").value !== "infer";
  for (const el of document.querySelectorAll("label.train")) el.hidden = !train;
  for (const el of document.querySelectorAll("label.infer")) el.hidden = train;
}

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

function status(text, busy) {
  $("status").textContent = text;
  $("status").className = busy ? "busy" : "";
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
    status(e.message);
    if (hub) { $("hub-error").textContent = e.message; $("hub-error").hidden = false; }
    document.body.dataset.state = "error";
  }
}

function showReport(r, svg) {
  const p = r.per_gpu;
  $("peak-gib").textContent = gib(p.peak_allocated);
  $("peak-bytes").textContent = thousands(p.peak_allocated);
  $("peak-bytes").dataset.bytes = p.peak_allocated == null ? "" : String(p.peak_allocated);
  $("device-gib").textContent = gib(p.device_total);
  const v = $("verdict");
  if (r.fit) {
    const tight = r.fit.headroom < GIB ? " — tight: under 1 GiB free" : "";
    v.textContent = r.fit.fits ? `fits ${r.fit.gpu} (${human(r.fit.headroom)} free)${tight}`
                  : r.fit.headroom >= 0 ? `does not fit ${r.fit.gpu}: the engine would not start (see the warnings)`
                  : `does not fit ${r.fit.gpu} (${human(-r.fit.headroom)} over)`;
    v.className = r.fit.fits ? "fits" : "nofit";
  } else { v.textContent = "no GPU chosen"; v.className = ""; }
  // The server's SVG: built from escaped text only, no scripts.
  $("picture").innerHTML = svg;
  if (r.phases) showPipelineReport(r); else $("phases").replaceChildren();
  const colour = {};
  for (const s of document.querySelectorAll("#picture rect.swatch")) colour[s.dataset.category] = s.getAttribute("fill");
  const body = $("breakdown").tBodies[0];
  body.replaceChildren();
  for (const [cat, bytes] of Object.entries(p.components)) {
    if (!bytes) continue;
    const tr = body.insertRow();
    tr.dataset.category = cat;
    const name = tr.insertCell();
    const sw = document.createElement("span");
    sw.className = "sw";
    sw.style.background = colour[cat] || "#fff";
    name.append(sw, cat.replace(/_/g, " "));
    const g = tr.insertCell(); g.className = "n"; g.textContent = human(bytes);
    g.title = thousands(bytes) + " bytes";
  }
  showAdvice(r);
  const warn = $("warnings");
  warn.replaceChildren();
  for (const w of r.warnings) { const li = document.createElement("li"); li.textContent = w; warn.append(li); }
}

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
    tr.addEventListener("click", () => applyChanges(a.changes));
  }
  out.replaceChildren(head, t);
}

function table(id, heads) {
  const t = document.createElement("table");
  t.id = id;
  t.createTHead().insertRow().append(...heads.map((h) => { const th = document.createElement("th"); th.textContent = h; return th; }));
  t.createTBody();
  return t;
}

function cell(tr, text, numeric) {
  const td = tr.insertCell(); td.textContent = text; if (numeric) td.className = "n"; return td;
}

// The job's `allocator` (a PYTORCH_CUDA_ALLOC_CONF string, or the contract's object as a
// report or advice echoes it) in the variable's syntax, for the form.
function allocConf(a) {
  if (!a) return "";
  if (typeof a === "string") return a;
  const parts = [];
  if (a.expandable_segments) parts.push("expandable_segments:True");
  if (a.max_split_size_mb != null) parts.push(`max_split_size_mb:${a.max_split_size_mb}`);
  if (a.garbage_collection_threshold != null) parts.push(`garbage_collection_threshold:${a.garbage_collection_threshold}`);
  if (typeof a.roundup_power2_divisions === "number") parts.push(`roundup_power2_divisions:${a.roundup_power2_divisions}`);
  return parts.join(",");
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

function applyChanges(changes) {
  const job = Object.assign(jobFromForm(), changes);
  formFromJob(job);
  update();
}

function reveal(out, opts) { if (!opts || opts.scroll !== false) out.scrollIntoView({ block: "nearest" }); }

// A dropped or chosen file: a config.json becomes the model; anything else is sent to
// /api/analyze as a measurement and overlaid on the picture.
async function useFile(file) {
  if (!file) return;
  const head = new Uint8Array(await file.slice(0, 1).arrayBuffer());
  if (/\.json$/i.test(file.name) && head[0] === 0x7b) {
    const text = await file.text();
    let v = null;
    try { v = JSON.parse(text); } catch (_) { /* not JSON: try it as a measurement */ }
    if (v && (v.model_type || v.architectures)) {
      $("config").value = JSON.stringify(v, null, 1);
      $("paste").open = true;
      status("");
      schedule();
      return;
    }
    // A JSON object that is no model config: a training config (DeepSpeed) if the server's
    // --from readers take it, else a measurement below.
    if (v && await useConfig(file, text, true)) return;
  }
  if (/\.(ya?ml|toml)$/i.test(file.name)) { await useConfig(file, await file.text(), false); return; }
  if (/\.(safetensors|gguf)$/i.test(file.name)) { await uploadModel(file); return; }
  status(`analyzing ${file.name}…`, true);
  try {
    const resp = await fetch("/api/analyze", { method: "POST", body: file });
    const text = await resp.text();
    if (!resp.ok) {
      let msg = text;
      try { msg = JSON.parse(text).error; } catch (_) { /* keep the text */ }
      throw new Error(msg);
    }
    measured = JSON.parse(text);
    measuredId++;
    $("measured-name").textContent = file.name;
    $("measurement").hidden = false;
    const peak = measured.per_gpu.peak_allocated;
    $("measured-gib").textContent = gib(peak);
    $("measured-bytes").textContent = thousands(peak);
    $("measured-bytes").dataset.bytes = peak == null ? "" : String(peak);
    $("measured-line").hidden = false;
    showMeasurement(file.name, measured);
    status("");
    await update();
  } catch (e) { status(`${file.name}: ${e.message}`); }
}

// Training configs read so far (`{name, text}`, the API's `from` entries), latest last.
let fromFiles = [];

// A dropped or chosen training config: the server reads it with `--from`'s readers beside the
// ones read before (/api/from); the fields it sets go into the form, the lines saying where each
// came from and what was ignored are listed under the drop target. `quiet`: a file the readers
// do not take is left to the caller (false returned) instead of shown as an error.
async function useConfig(file, text, quiet) {
  const entries = fromFiles.filter((e) => e.name !== file.name).concat([{ name: file.name, text }]);
  status(`reading ${file.name}…`, true);
  let answer;
  try { answer = JSON.parse(await post("/api/from", { from: entries })); }
  catch (e) {
    if (quiet) { status(""); return false; }
    status(e.message);
    return true;
  }
  fromFiles = entries;
  let current = {};
  try { current = jobFromForm(); } catch (_) { /* the files' fields alone */ }
  formFromJob(Object.assign(current, answer.job));
  showFrom(answer.notes || []);
  status("");
  schedule();
  return true;
}

function showFrom(notes) {
  $("from-names").textContent = fromFiles.map((e) => e.name).join(", ");
  const list = $("from-notes");
  list.replaceChildren();
  for (const n of notes) {
    const li = document.createElement("li");
    li.textContent = n;
    if (/ignored|not modelled/.test(n)) li.className = "warn";
    list.append(li);
  }
  $("from-out").hidden = fromFiles.length === 0;
}

function clearFrom() {
  fromFiles = [];
  showFrom([]);
}

// Largest part of a GGUF sent: its header (metadata with the tokenizer, tensor infos) fits in
// far less for the models we know; the server pads the rest by what the header says.
const GGUF_HEAD = 32 * 1024 * 1024;

// A dropped .safetensors/.gguf: only its header is sent (safetensors: the u64 LE header length N
// and N bytes, per the safetensors README; GGUF: the first GGUF_HEAD bytes), the server keeps it
// and answers an id, which becomes the model selector's choice.
async function uploadModel(file) {
  status(`reading ${file.name}…`, true);
  try {
    let part = file;
    if (/\.safetensors$/i.test(file.name)) {
      const dv = new DataView(await file.slice(0, 8).arrayBuffer());
      if (dv.byteLength < 8) throw new Error("too short for a safetensors file");
      const n = Number(dv.getBigUint64(0, true));
      if (n <= file.size - 8) part = file.slice(0, 8 + n);
    } else if (file.size > GGUF_HEAD) {
      part = file.slice(0, GGUF_HEAD);
    }
    const resp = await fetch("/api/upload-model?name=" + encodeURIComponent(file.name.replace(/[^A-Za-z0-9._-]/g, "_")),
                             { method: "POST", body: part });
    const text = await resp.text();
    if (!resp.ok) {
      let msg = text;
      try { msg = JSON.parse(text).error; } catch (_) { /* keep the text */ }
      throw new Error(msg);
    }
    const id = JSON.parse(text).model;
    const sel = field("model");
    let opt = [...sel.options].find((o) => o.value === id);
    if (!opt) { opt = new Option(`${file.name} (uploaded)`, id); sel.add(opt, 0); }
    sel.value = id;
    $("config").value = "";
    // LoRA targets are named as in transformers (q_proj, ...); a GGUF's tensors are not.
    if (/\.gguf$/i.test(file.name)) field("peft").value = "";
    status("");
    await update();
  } catch (e) { status(`${file.name}: ${e.message}`); }
}

// The measurement on its own: where its peak went, its largest allocations and sites, the
// allocator's fragmentation and any out-of-memory events.
function showMeasurement(name, a) {
  const out = $("measurement-view");
  const p = a.per_gpu || {};
  const lines = [`Measurement ${name} (${(a.source && a.source.kind) || "record"}): peak allocated ${human(p.peak_allocated)}` +
                 (p.peak_reserved != null ? `, reserved ${human(p.peak_reserved)}` : "")];
  const comps = Object.entries(p.components || {}).filter(([, b]) => b > 0).map(([c, b]) => `${c.replace(/_/g, " ")} ${human(b)}`);
  if (comps.length) lines.push("at the peak: " + comps.join(" · "));
  const parts = lines.map((l) => { const d = document.createElement("div"); d.textContent = l; return d; });
  const tops = (a.top_allocations || []).slice(0, 5);
  if (tops.length) {
    const t = table("measurement-top", ["top allocations", "bytes", "category"]);
    for (const x of tops) { const tr = t.tBodies[0].insertRow(); cell(tr, x.site || "?"); cell(tr, human(x.bytes), true); cell(tr, x.category || ""); }
    parts.push(t);
  }
  const sites = (a.top_frames || []).slice(0, 5);
  if (sites.length) {
    const t = table("measurement-sites", ["sites", "bytes", "count"]);
    for (const x of sites) { const tr = t.tBodies[0].insertRow(); cell(tr, x.site || "?"); cell(tr, human(x.bytes), true); cell(tr, String(x.count), true); }
    parts.push(t);
  }
  const more = [];
  if (a.fragmentation) more.push("fragmentation: " + JSON.stringify(a.fragmentation));
  more.push(`out-of-memory events: ${(a.ooms || []).length}`);
  for (const o of a.ooms || []) more.push("OOM: " + JSON.stringify(o));
  if (a.diagnosis) more.push(a.diagnosis);
  for (const w of a.warnings || []) more.push(w);
  for (const m of more) { const d = document.createElement("div"); d.textContent = m; parts.push(d); }
  out.replaceChildren(...parts);
  out.hidden = false;
}

function clearMeasured() {
  $("measurement-view").hidden = true;
  measured = null;
  measuredId++;
  $("measurement").hidden = true;
  $("measured-line").hidden = true;
  $("file").value = "";
  schedule();
}

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
    for (const n of a.notes) lines.push(n);
    if (at !== seq) return; // the job changed meanwhile
    out.replaceChildren(...lines.map((l) => { const d = document.createElement("div"); d.textContent = l; return d; }));
    reveal(out, opts);
  } catch (e) { out.textContent = "fit: " + e.message; }
}

async function whatIf(opts) {
  const out = $("whatif-out");
  shown.add("whatif");
  const at = seq;
  try {
    const rows = JSON.parse(await post("/api/whatif", jobFromForm()));
    const t = table("whatif-table", ["what if (flags)", "device", "saved", "fits"]);
    for (const w of rows) {
      const tr = t.tBodies[0].insertRow();
      tr.title = w.technique;
      const code = document.createElement("code"); code.className = "flags"; code.textContent = shownFlags(w.flags, w.env);
      tr.insertCell().append(code);
      cell(tr, human(w.device_total), true);
      cell(tr, w.saved == null ? "n/a" : (w.saved >= 0 ? "+" : "") + human(w.saved), true);
      cell(tr, w.fits == null ? "-" : (w.fits ? "yes" : "no"), true);
    }
    if (at !== seq) return; // the job changed meanwhile
    out.replaceChildren(t);
    reveal(out, opts);
  } catch (e) { out.textContent = "what-if: " + e.message; }
}

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
    const rows = [...r.best.slice(0, 5), ...(r.best_per_framework || [])];
    if (rows.length) {
      const t = table("plan-table", ["framework", "dp·tp·pp·cp", "zero", "offload", "ckpt", "micro-batch", "device", "host/GPU"]);
      for (const c of rows) {
        const l = c.layout; const tr = t.tBodies[0].insertRow();
        cell(tr, l.framework); cell(tr, `${l.dp}·${l.tp}·${l.pp}·${l.cp}`); cell(tr, String(l.zero));
        cell(tr, l.offload); cell(tr, l.checkpointing); cell(tr, String(l.micro_batch), true);
        const confirmed = c.estimate && c.estimate.device_total;
        cell(tr, human(confirmed != null ? confirmed : c.device_total), true);
        cell(tr, c.host_bytes ? human(c.host_bytes) : "-", true);
      }
      parts.push(t);
    }
    for (const a of r.advice || []) { const d = document.createElement("div"); d.textContent = a; parts.push(d); }
    if (at !== seq) return; // the job changed meanwhile
    out.replaceChildren(...parts);
    reveal(out, opts);
  } catch (e) { out.textContent = "plan: " + e.message; }
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(update, 150);
}

async function init() {
  try {
    const [models, gpus] = await Promise.all([fetch("/api/models").then((r) => r.json()),
                                              fetch("/api/gpus").then((r) => r.json())]);
    for (const m of models) field("model").add(new Option(`${m.id} (${m.architecture})`, m.id));
    for (const g of gpus) field("gpu").add(new Option(`${g.id} — ${g.name}`, g.id));
  } catch (e) { status("cannot load the catalogs: " + e.message); }
  field("model").value = "llama-3.1-8b";
  field("gpu").value = "h100-80gb";
  if (location.hash.startsWith("#job=")) {
    try { formFromJob(JSON.parse(decodeURIComponent(location.hash.slice(5)))); }
    catch (e) { status("the link's job cannot be read: " + e.message); }
  }
  // A linked job's Hub id may be a diffusers pipeline: asked before the first estimate.
  if ($("hub").value.trim()) await detectPipeline($("hub").value.trim());
  showTaskFields();
  // The Hub box is sent on Enter or blur (its "change"), not on every keystroke; first it is
  // asked whether it names a diffusers pipeline (pipeline.js), which has its own fields.
  $("hub").addEventListener("change", async (ev) => {
    ev.stopPropagation();
    status("reading " + ev.target.value.trim() + "…", true);
    await detectPipeline(ev.target.value.trim());
    schedule();
  });
  form.addEventListener("input", (ev) => { if (ev.target.id !== "file" && ev.target.id !== "hub") schedule(); });
  $("file").addEventListener("change", (ev) => { ev.stopPropagation(); useFile(ev.target.files[0]); });
  $("clear-measured").addEventListener("click", clearMeasured);
  $("clear-from").addEventListener("click", clearFrom);
  document.addEventListener("dragover", (ev) => { ev.preventDefault(); document.body.classList.add("dragging"); });
  document.addEventListener("dragleave", () => document.body.classList.remove("dragging"));
  document.addEventListener("drop", (ev) => {
    ev.preventDefault();
    document.body.classList.remove("dragging");
    useFile(ev.dataTransfer && ev.dataTransfer.files[0]);
  });
  field("torch_version").addEventListener("change", applyTorchDefaults);
  form.addEventListener("change", () => { showTaskFields(); schedule(); });
  form.addEventListener("submit", (ev) => { ev.preventDefault(); schedule(); });
  $("fit-btn").addEventListener("click", () => fit());
  $("whatif-btn").addEventListener("click", () => whatIf());
  $("plan-btn").addEventListener("click", () => plan());
  $("share").addEventListener("click", (ev) => {
    ev.preventDefault();
    if (navigator.clipboard) navigator.clipboard.writeText(location.href).catch(() => {});
  });
  await update();
}

init();
