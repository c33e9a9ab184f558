// vramscope web UI, dropped or chosen files: a config.json becomes the model, a training config
// is read with --from's readers, a .safetensors/.gguf header is uploaded, anything else is
// analyzed as a measurement.
"use strict";

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
