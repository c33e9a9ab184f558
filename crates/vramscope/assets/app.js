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
// Job fields the form has no control for (engine settings, RL, host RAM, ...), kept from a link,
// a training config or an applied piece of advice, and listed under "Other settings" where each
// can be removed. `parallel` here holds only the layout keys the form has no field for (cp, ep,
// sp, microbatches).
let extras = {};
// The job's fields the form's own controls hold (jobFromForm writes them, formFromJob reads them).
const FORM_FIELDS = new Set(["model", "task", "batch", "seq", "grad_accum", "new_tokens", "precision",
  "optimizer", "checkpointing", "attention", "weights", "framework", "kv_dtype", "cuda_module_loading",
  "zero_grad", "torch_version", "optimizer_impl", "peft", "parallel", "gpu", "reserve", "allocator",
  "loss", "optimizer_in_backward", "activation_offload", "compile"]);
// The layout's keys the form holds; dp among them, as it is derived from the GPUs (gpus / (tp ×
// pp × cp)) and never kept apart.
const PARALLEL_FIELDS = new Set(["gpus", "tp", "pp", "zero", "offload", "dp"]);
// A layout as advice echoes it (resolved) has these defaults: no setting of the user's.
const LAYOUT_DEFAULTS = { cp: 1, ep: 1, sp: false, microbatches: 1 };
// The training techniques shown as checkboxes: the job's field and the value a ticked box sends.
const TECHNIQUE_BOXES = { optimizer_in_backward: true, activation_offload: "cpu", compile: true };
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
    if (field("loss").value) job.loss = field("loss").value;
    for (const [k, on] of Object.entries(TECHNIQUE_BOXES)) if (field(k).checked) job[k] = on;
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
  const { parallel: moreLayout, ...more } = extras;
  Object.assign(job.parallel, moreLayout || {});
  Object.assign(job, more);
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
  set("loss", job.loss || "");
  for (const k of Object.keys(TECHNIQUE_BOXES)) {
    field(k).checked = job[k] != null && job[k] !== false && job[k] !== "none";
  }
  if (job.peft) { set("peft", job.peft.method); set("rank", job.peft.rank); }
  const p = job.parallel || {};
  for (const k of ["gpus", "tp", "pp", "zero", "offload"]) set(k, p[k]);
  field("gpu").value = job.gpu || "";
  field("reserve").value = job.reserve ? job.reserve / 1073741824 : 0;
  field("alloc_conf").value = allocConf(job.allocator);
  if (!job.peft) set("peft", "");
  extras = {};
  if (isPipelineJob(job)) pipelineFormFromJob(job);
  else {
    for (const [k, v] of Object.entries(job)) if (!FORM_FIELDS.has(k) && v != null) extras[k] = v;
    const layout = Object.entries(p).filter(([k, v]) => !PARALLEL_FIELDS.has(k) && v != null && v !== LAYOUT_DEFAULTS[k]);
    if (layout.length) extras.parallel = Object.fromEntries(layout);
  }
  showExtras();
  showTaskFields();
}

// The extras as one row each (an object's keys one row each: engine.max_model_len), each with a
// button that removes it.
function showExtras() {
  const list = $("extras-list");
  list.replaceChildren();
  const row = (path, value, remove) => {
    const li = document.createElement("li");
    li.dataset.field = path;
    const name = document.createElement("code"); name.textContent = path;
    const val = document.createElement("span"); val.textContent = typeof value === "string" ? value : JSON.stringify(value);
    const x = document.createElement("button"); x.type = "button"; x.textContent = "×";
    x.title = `remove ${path} (back to its default)`;
    x.addEventListener("click", () => { remove(); showExtras(); markApplied(null); schedule(); });
    li.append(name, val, x);
    list.append(li);
  };
  for (const [k, v] of Object.entries(extras)) {
    if (v && typeof v === "object" && !Array.isArray(v) && (k === "engine" || k === "parallel")) {
      for (const [sub, sv] of Object.entries(v)) {
        row(`${k}.${sub}`, sv, () => { delete extras[k][sub]; if (!Object.keys(extras[k]).length) delete extras[k]; });
      }
    } else {
      row(k, v, () => { delete extras[k]; });
    }
  }
  $("extras").hidden = list.children.length === 0;
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
    clearReport(e.message); // the verdict says why
    status("");
    if (hub) { $("hub-error").textContent = e.message; $("hub-error").hidden = false; }
    document.body.dataset.state = "error";
  }
}

// No answer for the job on show: the previous job's figures, picture and verdict go, and the
// verdict says why.
function clearReport(why) {
  for (const id of ["peak-gib", "peak-bytes", "device-gib"]) $(id).textContent = "–";
  $("peak-bytes").dataset.bytes = "";
  $("verdict").textContent = "no estimate: " + why;
  $("verdict").className = "nofit";
  $("picture").replaceChildren();
  $("phases").replaceChildren();
  $("breakdown").tBodies[0].replaceChildren();
  $("warnings").replaceChildren();
  $("advice-out").replaceChildren();
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
  const label = {};
  for (const s of document.querySelectorAll("#picture rect.swatch")) {
    colour[s.dataset.category] = s.getAttribute("fill");
    if (s.dataset.label) label[s.dataset.category] = s.dataset.label;
  }
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
    // The picture's name for it (vLLM's reserve is its KV pool), so table and legend agree.
    name.append(sw, label[cat] || cat.replace(/_/g, " "));
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
    tr.addEventListener("click", () => applyChanges(a.changes, shownFlags(a.flags, a.env)));
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

// A cell: `numeric` right-aligned on one line; "wrap" for long words (paths) that may break anywhere.
function cell(tr, text, numeric) {
  const td = tr.insertCell(); td.textContent = text;
  if (numeric) td.className = numeric === "wrap" ? "wrap" : "n";
  return td;
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
    const resp = await fetch("/api/analyze", { method: "POST", body: file,
      headers: { "Content-Type": "application/octet-stream" } });
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
                             { method: "POST", body: part,
                               headers: { "Content-Type": "application/octet-stream" } });
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
  const kind = typeof a.source === "string" ? a.source : (a.source && a.source.kind) || "record";
  const lines = [`Measurement ${name} (${kind}): peak allocated ${human(p.peak_allocated)}` +
                 (p.peak_reserved != null ? `, reserved ${human(p.peak_reserved)}` : "")];
  const comps = Object.entries(p.components || {}).filter(([, b]) => b > 0).map(([c, b]) => `${c.replace(/_/g, " ")} ${human(b)}`);
  if (comps.length) lines.push("at the peak: " + comps.join(" · "));
  const parts = lines.map((l) => { const d = document.createElement("div"); d.textContent = l; return d; });
  const tops = (a.top_allocations || []).slice(0, 5);
  if (tops.length) {
    const t = table("measurement-top", ["top allocations", "bytes", "category"]);
    for (const x of tops) { const tr = t.tBodies[0].insertRow(); cell(tr, x.site || "?", "wrap"); cell(tr, human(x.bytes), true); cell(tr, x.category || ""); }
    parts.push(t);
  }
  const sites = (a.top_frames || []).slice(0, 5);
  if (sites.length) {
    const t = table("measurement-sites", ["sites", "bytes", "count"]);
    for (const x of sites) { const tr = t.tBodies[0].insertRow(); cell(tr, x.site || "?", "wrap"); cell(tr, human(x.bytes), true); cell(tr, String(x.count), true); }
    parts.push(t);
  }
  if (a.fragmentation) parts.push(...fragmentationRows(a.fragmentation));
  if (a.oom) parts.push(...oomMessageRows(a.oom));
  if (a.allocator) parts.push(...allocatorRows(a.allocator));
  const ooms = a.ooms || [];
  if (!a.oom) {
    const oomLine = document.createElement("div");
    oomLine.textContent = `out-of-memory events: ${ooms.length}`;
    parts.push(oomLine);
  }
  if (ooms.length) {
    const t = table("measurement-ooms", ["out of memory: requested", "free on the device", "site"]);
    for (const o of ooms) { const tr = t.tBodies[0].insertRow(); cell(tr, human(o.requested), true); cell(tr, human(o.device_free), true); cell(tr, o.site || "?", "wrap"); }
    parts.push(t);
  }
  const more = [];
  if (a.diagnosis) more.push(a.diagnosis);
  for (const w of a.warnings || []) more.push(w);
  for (const m of more) { const d = document.createElement("div"); d.textContent = m; parts.push(d); }
  out.replaceChildren(...parts);
  out.hidden = false;
}

// A titled two-column table of (what, figure) rows.
function rowsTable(id, title, rows) {
  const h = document.createElement("h3");
  h.textContent = title;
  const t = table(id, ["", ""]);
  t.tHead.remove();
  for (const [k, v] of rows) { const tr = t.tBodies[0].insertRow(); cell(tr, k); cell(tr, v, "wrap"); }
  return [h, t];
}

function pct(x) { return x == null ? "n/a" : `${(100 * x).toFixed(1)} %`; }

// The segments at the end of the record (analyze's `fragmentation`), as `analyze` says them.
function fragmentationRows(f) {
  return rowsTable("measurement-fragmentation", "Segments at the end of the record", [
    ["segments", thousands(f.segments)],
    ["reserved", human(f.reserved)],
    ["allocated", human(f.allocated)],
    ["freed, pending on a stream", human(f.active_pending_free)],
    ["cached free (reusable only by requests that fit)", `${human(f.external_free)} (${pct(f.external_fraction)} of reserved)`],
    ["largest free block", human(f.largest_free_block)],
    ["rounding inside allocated blocks", human(f.internal_free)],
  ]);
}

// The figures PyTorch's out-of-memory message states (analyze's `oom`), those it states only.
function oomMessageRows(o) {
  const rows = [["tried to allocate", o.requested], ["GPU capacity", o.capacity], ["free", o.free],
    ["this process has in use", o.process_in_use], ["allocated by PyTorch", o.allocated],
    ["reserved by PyTorch", o.reserved], ["reserved but unallocated", o.reserved_unallocated],
    ["other processes", o.other_processes]].filter(([, b]) => b != null).map(([k, b]) => [k, human(b)]);
  if (o.device != null) rows.unshift(["device", String(o.device)]);
  return rowsTable("measurement-oom-message", "The out-of-memory message", rows);
}

// analyze's `allocator`: a snapshot's trace replayed through the caching allocator and its
// what-ifs (docs/analyze.md), or an OOM message's expandable-segments hint.
function allocatorRows(x) {
  if (x.env) {
    return rowsTable("measurement-allocator", "Allocator", [
      ["set before the process starts", x.env],
      ["can make usable again at most", human(x.gives_back_up_to)],
      ["the failed request could fit then", x.request_could_fit ? "possibly (necessary, not sufficient)" : "no"],
    ]);
  }
  const rows = [
    ["peak reserved, replayed", human(x.replayed_peak_reserved)],
    ["peak reserved, recorded", human(x.recorded_peak_reserved)],
    ["fragmentation (1 − peak allocated / peak reserved, replayed)", pct(x.fragmentation)],
    ["settings replayed", x.alloc_conf ? `PYTORCH_CUDA_ALLOC_CONF=${x.alloc_conf}` : "PyTorch's defaults"],
    ["segment events as recorded", x.exact ? "all, exactly" : "not all (see the notes)"],
    ["history", x.complete_history ? "complete (from nothing reserved)" : "starts mid-run"],
  ];
  const parts = rowsTable("measurement-allocator", "The allocator replayed", rows);
  const whatif = Object.entries(x.whatif || {});
  if (whatif.length) {
    const t = table("measurement-allocator-whatif", ["with PYTORCH_CUDA_ALLOC_CONF", "peak reserved", "against the record's settings"]);
    for (const [setting, bytes] of whatif) {
      const tr = t.tBodies[0].insertRow();
      const code = document.createElement("code");
      code.textContent = setting === "expandable_segments" ? "expandable_segments:True" : setting;
      tr.insertCell().append(code);
      cell(tr, human(bytes), true);
      const d = x.whatif_baseline == null ? null : x.whatif_baseline - bytes;
      cell(tr, d == null ? "n/a" : d > 0 ? `${human(d)} less` : d < 0 ? `${human(-d)} more` : "the same", true);
    }
    parts.push(t);
  }
  for (const n of x.notes || []) { const d = document.createElement("div"); d.className = "hint"; d.textContent = n; parts.push(d); }
  return parts;
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
  $("undo-applied").addEventListener("click", undoApplied);
  // The user's own edit ends the outlines of the last applied advice (its undo stays).
  form.addEventListener("input", () => {
    for (const el of document.querySelectorAll(".applied-change")) el.classList.remove("applied-change");
  });
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
