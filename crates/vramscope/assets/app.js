// vramscope web UI: the form is the job; every change posts it to /api/estimate (numbers and
// table) and /api/picture (the SVG that `estimate --svg` writes) and shows both. The job lives
// in the URL's hash (#job=<JSON>) so a link reproduces the view. No library, no other origin.
//
// The page's scripts are classic scripts sharing one global scope, loaded in order by
// index.html; this one, last, wires the controls and starts.
"use strict";

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
