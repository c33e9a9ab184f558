// vramscope web UI, the page's elements: the lookup by id, the tables every panel builds, the
// status line, and bringing an answer into view.
"use strict";

const $ = (id) => document.getElementById(id);

function status(text, busy) {
  $("status").textContent = text;
  $("status").className = busy ? "busy" : "";
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

function reveal(out, opts) { if (!opts || opts.scroll !== false) out.scrollIntoView({ block: "nearest" }); }
