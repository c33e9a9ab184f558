// vramscope web UI, the estimate on show: the peak, the verdict, the picture and the breakdown
// table, or why there is none.
"use strict";

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
