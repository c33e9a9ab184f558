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

function gib(b) { return b == null ? "n/a" : (b / GIB).toFixed(2); }
function thousands(b) { return b == null ? "n/a" : String(b).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
function field(name) { return form.elements[name]; }
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
  const task = field("task").value;
  job.task = task;
  job.batch = num("batch");
  job.seq = num("seq");
  if (task === "train") {
    job.grad_accum = num("grad_accum");
    if (field("optimizer").value) job.optimizer = field("optimizer").value;
    job.checkpointing = field("checkpointing").value;
  } else {
    job.new_tokens = num("new_tokens");
    if (field("kv_dtype").value) job.kv_dtype = field("kv_dtype").value;
  }
  if (field("precision").value) job.precision = field("precision").value;
  job.attention = field("attention").value;
  job.cuda_module_loading = field("cuda_module_loading").value;
  if (field("peft").value) {
    job.peft = { method: field("peft").value, rank: num("rank"), alpha: 2 * num("rank"),
                 targets: ["q_proj", "k_proj", "v_proj", "o_proj"] };
  }
  if (field("weights").value.trim()) job.weights = field("weights").value.trim();
  job.framework = field("framework").value;
  job.parallel = { gpus: num("gpus"), tp: num("tp"), pp: num("pp"), zero: num("zero"),
                   offload: field("offload").value };
  job.gpu = field("gpu").value || null;
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
  if (job.peft) { set("peft", job.peft.method); set("rank", job.peft.rank); }
  const p = job.parallel || {};
  for (const k of ["gpus", "tp", "pp", "zero", "offload"]) set(k, p[k]);
  field("gpu").value = job.gpu || "";
  showTaskFields();
}

function showTaskFields() {
  const train = field("task").value === "train";
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
  let job;
  try { job = jobFromForm(); } catch (e) { status(e.message); return; }
  shareLink(job);
  const mine = ++seq;
  const hub = typeof job.model === "string" && job.model === $("hub").value.trim() ? job.model : "";
  status(hub ? `fetching ${hub} (config and headers)…` : "estimating…", true);
  $("hub-error").hidden = true;
  document.body.dataset.state = "busy";
  try {
    const picture = measured ? post("/api/compare?picture=svg", { job, analysis: measured })
                             : post("/api/picture", job);
    const [reportText, svg] = await Promise.all([post("/api/estimate", job), picture]);
    if (mine !== seq) return;
    showReport(JSON.parse(reportText), svg);
    status("");
    document.body.dataset.state = "ready";
  } catch (e) {
    if (mine !== seq) return;
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
    v.textContent = r.fit.fits ? `fits ${r.fit.gpu} (${gib(r.fit.headroom)} GiB free)`
                               : `does not fit ${r.fit.gpu} (${gib(-r.fit.headroom)} GiB over)`;
    v.className = r.fit.fits ? "fits" : "nofit";
  } else { v.textContent = "no GPU chosen"; v.className = ""; }
  // The server's SVG: built from escaped text only, no scripts.
  $("picture").innerHTML = svg;
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
    const g = tr.insertCell(); g.className = "n"; g.textContent = gib(bytes);
    const b = tr.insertCell(); b.className = "n"; b.textContent = thousands(bytes);
  }
  const warn = $("warnings");
  warn.replaceChildren();
  for (const w of r.warnings) { const li = document.createElement("li"); li.textContent = w; warn.append(li); }
}

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
  }
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
    $("measured-name").textContent = file.name;
    $("measurement").hidden = false;
    const peak = measured.per_gpu.peak_allocated;
    $("measured-gib").textContent = gib(peak);
    $("measured-bytes").textContent = thousands(peak);
    $("measured-bytes").dataset.bytes = peak == null ? "" : String(peak);
    $("measured-line").hidden = false;
    status("");
    await update();
  } catch (e) { status(`${file.name}: ${e.message}`); }
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

function clearMeasured() {
  measured = null;
  $("measurement").hidden = true;
  $("measured-line").hidden = true;
  $("file").value = "";
  schedule();
}

async function fit() {
  const out = $("fit-out");
  try {
    const job = jobFromForm();
    if (!job.gpu) { out.textContent = "Choose a GPU to fit."; return; }
    out.textContent = "searching…";
    const a = JSON.parse(await post("/api/fit", job));
    const show = (n) => (n == null ? "none (even 1 does not fit)" : thousands(n));
    const lines = [`Fit on ${a.gpu} (${gib(a.capacity)} GiB):`, `largest batch: ${show(a.max_batch)}`];
    if ("max_seq" in a) lines.push(`longest sequence at batch ${job.batch}: ${show(a.max_seq)}`);
    if ("max_context" in a) lines.push(`longest context at batch ${job.batch}: ${show(a.max_context)}`);
    for (const n of a.notes) lines.push(n);
    out.replaceChildren(...lines.map((l) => { const d = document.createElement("div"); d.textContent = l; return d; }));
  } catch (e) { out.textContent = "fit: " + e.message; }
}

async function whatIf() {
  const out = $("whatif-out");
  try {
    const rows = JSON.parse(await post("/api/whatif", jobFromForm()));
    const t = document.createElement("table");
    t.id = "whatif-table";
    t.createTHead().insertRow().append(...["technique", "device GiB", "saved GiB", "fits"].map((h) => {
      const th = document.createElement("th"); th.textContent = h; return th;
    }));
    const body = t.createTBody();
    for (const w of rows) {
      const tr = body.insertRow();
      tr.title = w.change;
      const cells = [w.technique, gib(w.device_total),
                     w.saved == null ? "n/a" : (w.saved >= 0 ? "+" : "") + (w.saved / GIB).toFixed(2),
                     w.fits == null ? "-" : (w.fits ? "yes" : "no")];
      cells.forEach((c, i) => { const td = tr.insertCell(); td.textContent = c; if (i) td.className = "n"; });
    }
    out.replaceChildren(t);
  } catch (e) { out.textContent = "what-if: " + e.message; }
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
  showTaskFields();
  // The Hub box is sent on Enter or blur (its "change"), not on every keystroke.
  form.addEventListener("input", (ev) => { if (ev.target.id !== "file" && ev.target.id !== "hub") schedule(); });
  $("file").addEventListener("change", (ev) => { ev.stopPropagation(); useFile(ev.target.files[0]); });
  $("clear-measured").addEventListener("click", clearMeasured);
  document.addEventListener("dragover", (ev) => { ev.preventDefault(); document.body.classList.add("dragging"); });
  document.addEventListener("dragleave", () => document.body.classList.remove("dragging"));
  document.addEventListener("drop", (ev) => {
    ev.preventDefault();
    document.body.classList.remove("dragging");
    useFile(ev.dataTransfer && ev.dataTransfer.files[0]);
  });
  form.addEventListener("change", () => { showTaskFields(); schedule(); });
  form.addEventListener("submit", (ev) => { ev.preventDefault(); schedule(); });
  $("fit-btn").addEventListener("click", fit);
  $("whatif-btn").addEventListener("click", whatIf);
  $("share").addEventListener("click", (ev) => {
    ev.preventDefault();
    if (navigator.clipboard) navigator.clipboard.writeText(location.href).catch(() => {});
  });
  await update();
}

init();
