// vramscope web UI, figures: bytes in GiB and in adaptive binary units as the CLI prints them,
// thousands separators, percentages.
"use strict";

const GIB = 1024 ** 3;

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

function pct(x) { return x == null ? "n/a" : `${(100 * x).toFixed(1)} %`; }
