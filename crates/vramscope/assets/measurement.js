// vramscope web UI, a measurement (analyze's JSON for a dropped record): overlaid on the
// picture, and shown on its own: peak, top allocations and sites, segments, the
// out-of-memory message, the allocator replayed.
"use strict";

let measured = null; // analyze's JSON for a dropped measurement, overlaid on the picture
let measuredId = 0; // bumped whenever `measured` changes

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
