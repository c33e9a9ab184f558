// vramscope web UI, the form: the job it describes (jobFromForm) and the form set from a job
// (formFromJob), the fields it has no control for ("Other settings"), the fields shown per task.
"use strict";

const form = document.getElementById("job");
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
