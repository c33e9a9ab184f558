// End-to-end test of the web UI in a real browser: Debian's chromium, headless, driven by
// playwright-core. Loads the page from a running `vramscope serve`, changes the batch, and
// checks that the peak the page shows becomes the one POST /api/estimate returns for the job
// the page encodes in its URL. Also: the page requests nothing from another origin, and the
// fit and what-if buttons answer (in view), answers are asked again when the job changes,
// fields follow the task, advice rows apply when clicked, the plan view lists layouts, a chosen
// GGUF becomes the model and a measurement gets its own view, a diffusers pipeline asks its own
// fields and shows its phases. Issue 31's surfaces: the fit's launch line, the what-if's and the
// plan's time columns (the plan's best row labelled, never repeated), the measurement's segments,
// allocator replay and OOM message as rows (the page no wider than its window), the step plot
// scaled to the step, a config naming a model that cannot be fetched clearing the old answer,
// applied advice shown in the form and undone, every job field a control or a removable row,
// every label inside the picture and whole, the vLLM pool named one way. Saves screenshots
// (CI artifacts).
//
//   VRAMSCOPE_URL=http://127.0.0.1:8765/ node e2e.mjs
//
// Env: VRAMSCOPE_URL (required), CHROMIUM (default /usr/bin/chromium), SCREENSHOT (default
// ../../target/browser/screenshot.png).
import { chromium } from "playwright-core";
import { existsSync, mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const base = process.env.VRAMSCOPE_URL;
if (!base) { console.error("set VRAMSCOPE_URL to the server's URL"); process.exit(2); }
const exe = process.env.CHROMIUM || "/usr/bin/chromium";
const shot = resolve(process.env.SCREENSHOT || resolve(here, "../../target/browser/screenshot.png"));
const origin = new URL(base).origin;
const STEP = 30_000; // each wait

// The whole test must end by itself, whatever hangs.
const watchdog = setTimeout(() => { console.error("FAIL: browser test took over 300 s"); process.exit(1); }, 300_000);

function check(cond, msg) {
  if (!cond) throw new Error(msg);
  console.log("ok -", msg);
}

const browser = await chromium.launch({
  executablePath: exe,
  headless: true,
  timeout: 60_000,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"],
});
let failed = false;
try {
  const foreign = [];
  const errors = [];
  // Set while a step expects the server to refuse (a model that cannot be fetched).
  let refusalsExpected = false;
  const watch = (pg) => {
    pg.setDefaultTimeout(STEP);
    pg.on("request", (r) => { if (!r.url().startsWith(origin) && !r.url().startsWith("data:")) foreign.push(r.url()); });
    pg.on("console", (m) => { if (m.type() === "error" && !refusalsExpected) errors.push(m.text()); });
    pg.on("pageerror", (e) => errors.push(String(e)));
    pg.on("response", async (r) => {
      if (r.status() >= 400 && !refusalsExpected) errors.push(`${r.status()} ${r.url()}: ${await r.text().catch(() => "")}`);
    });
    return pg;
  };
  const page = watch(await browser.newPage({ viewport: { width: 1400, height: 1100 } }));
  // A fresh page showing `job` (as a link would), once its answer is on show.
  const openJob = async (job) => {
    const pg = watch(await browser.newPage({ viewport: { width: 1400, height: 1100 } }));
    await pg.goto(base + "#job=" + encodeURIComponent(JSON.stringify(job)), { waitUntil: "load" });
    await pg.waitForFunction(() => document.body.dataset.state === "ready");
    return pg;
  };
  const api = async (path, job) => {
    const r = await fetch(new URL(path, base), {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(job),
    });
    if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
    return r.json();
  };
  const jobOf = (pg) => JSON.parse(decodeURIComponent(new URL(pg.url()).hash.slice(5)));
  // The page is no wider than its window (nothing pushes it sideways).
  const noSideways = (pg) => pg.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);

  await page.goto(base, { waitUntil: "load", timeout: STEP });
  await page.waitForFunction(() => document.body.dataset.state === "ready");
  const before = await page.getAttribute("#peak-bytes", "data-bytes");
  check(/^\d+$/.test(before), `the page shows a peak at load (${before} bytes)`);
  check(await page.locator("#picture svg rect.segment").count() > 0, "the picture is drawn");

  // Change a knob: batch 1 → 8.
  await page.fill("input[name=batch]", "8");
  await page.waitForFunction((old) => {
    const el = document.getElementById("peak-bytes");
    return document.body.dataset.state === "ready" && el.dataset.bytes && el.dataset.bytes !== old;
  }, before);
  const shown = await page.getAttribute("#peak-bytes", "data-bytes");
  const shownGib = await page.textContent("#peak-gib");

  // The job the page encodes in its URL, sent to the API by this script.
  const url = new URL(page.url());
  check(url.hash.startsWith("#job="), "the URL encodes the job");
  const job = JSON.parse(decodeURIComponent(url.hash.slice(5)));
  check(job.batch === 8, "the encoded job has the new batch");
  const resp = await fetch(new URL("/api/estimate", base), {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(job),
  });
  check(resp.ok, `POST /api/estimate answers ${resp.status}`);
  const report = await resp.json();
  const expected = report.per_gpu.peak_allocated;
  check(String(expected) === shown, `displayed peak ${shown} == API peak_allocated ${expected}`);
  check(shown !== before, `the peak changed with the batch (${before} -> ${shown})`);
  check(shownGib === (expected / 1024 ** 3).toFixed(2), `displayed GiB ${shownGib} matches`);

  // A shared link reproduces the view in a fresh page.
  const again = await browser.newPage();
  again.setDefaultTimeout(STEP);
  await again.goto(page.url(), { waitUntil: "load" });
  await again.waitForFunction(() => document.body.dataset.state === "ready");
  check(await again.getAttribute("#peak-bytes", "data-bytes") === shown, "the shared link shows the same peak");
  await again.close();

  await page.click("#fit-btn");
  await page.waitForFunction(() => /largest batch/.test(document.getElementById("fit-out").textContent));
  check(true, "fit answers: " + (await page.textContent("#fit-out")).slice(0, 80));
  await page.click("#whatif-btn");
  await page.waitForSelector("#whatif-table tbody tr");
  check(await page.locator("#whatif-table tbody tr").count() > 0, "what-if lists techniques");
  {
    // The columns the CLI's what-if table has: time (the change's time per token against the
    // job's, as a signed percentage) and the modelled step, each row's the API's.
    const heads = await page.$$eval("#whatif-table thead th", (t) => t.map((x) => x.textContent));
    check(heads.includes("time") && heads.includes("step"), `what-if has time and step columns (${heads.join(", ")})`);
    const rows = await api("/api/whatif", jobOf(page));
    const cells = await page.$$eval("#whatif-table tbody tr", (trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
    // The CLI's rule (render/whatif.rs time_cost): under half a percent "0 %", else the sign
    // (− faster) and the rounded percentage.
    const pctOf = (c) => c == null ? "-" : Math.abs(c) < 0.005 ? "0 %" : `${c < 0 ? "−" : "+"}${(100 * Math.abs(c)).toFixed(0)} %`;
    const ti = heads.indexOf("time");
    check(rows.length === cells.length && rows.every((w, i) => cells[i][ti] === pctOf(w.time_cost)),
          "every what-if row's time is the API's time_cost");
    // Full checkpointing runs the forward twice: it costs time on any GPU with speeds.
    const ck = cells.find((c) => c[0] === "--checkpointing full");
    check(ck && ck[ti].startsWith("+"), `full checkpointing costs time (${ck && ck[ti]})`);
  }

  const inView = (sel) => page.evaluate((q) => {
    const r = document.querySelector(q).getBoundingClientRect();
    return r.top < window.innerHeight && r.bottom > 0;
  }, sel);
  check(await inView("#whatif-table"), "the what-if answer is in view after the click");

  // Stale answers: the what-if on show is asked again for the new job (an inference job gets
  // inference rows, none of the training optimizer's).
  await page.selectOption("select[name=task]", "infer");
  await page.waitForFunction(() => {
    const t = document.getElementById("whatif-table");
    return document.body.dataset.state === "ready" && t && !/--optimizer/.test(t.textContent)
      && /--kv-dtype|--weights/.test(t.textContent);
  });
  check(true, "after the job changed, the what-if is the new job's (no training rows)");
  // Fields by task: training-only fields are hidden for inference, inference-only shown.
  check(await page.isHidden("select[name=optimizer]"), "the optimizer is hidden for inference");
  check(await page.isVisible("input[name=new_tokens]"), "new tokens are shown for inference");
  await page.selectOption("select[name=task]", "train");
  await page.waitForFunction(() => document.body.dataset.state === "ready");
  check(await page.isVisible("select[name=optimizer]") && await page.isHidden("input[name=new_tokens]"),
        "the training fields come back for training");
  check(await page.inputValue("select[name=peft]") === "", "no LoRA by default, as the CLI");

  // Advice: a job that does not fit lists changes; clicking the first applies it and fits.
  await page.selectOption("select[name=model]", "llama-3.1-8b");
  await page.fill("input[name=batch]", "1");
  await page.selectOption("select[name=gpu]", "rtx4090-24gb");
  await page.waitForSelector("#advice-table tbody tr");
  check(await page.getAttribute("#verdict", "class") === "nofit", "llama-3.1-8b does not fit an RTX 4090");
  const nofitJob = jobOf(page);
  const advice = (await api("/api/estimate", nofitJob)).advice[0];
  await page.click("#advice-table tbody tr");
  await page.waitForFunction(() => document.body.dataset.state === "ready"
    && document.getElementById("verdict").className === "fits");
  check(true, "the first advice, clicked, fits: " + await page.textContent("#verdict"));
  {
    // What was applied is said, each setting it changed is shown by a control (outlined) or an
    // "Other settings" row, and undo brings the job before it back.
    check(await page.isVisible("#applied") && (await page.textContent("#applied-text")).includes(advice.flags.join(" ")),
          `the applied advice is said (${await page.textContent("#applied-text")})`);
    const shownBy = async (k, v) => page.evaluate(([k, v]) => {
      const f = document.getElementById("job").elements[k === "allocator" ? "alloc_conf" : k];
      if (f && f.type === "checkbox") return f.checked === !!v && f.closest("label").classList.contains("applied-change");
      if (f) return String(f.value) === String(v) && f.classList.contains("applied-change");
      return document.querySelector(`#extras-list li[data-field="${k}"]`) !== null;
    }, [k, v]);
    const pairs = Object.entries(advice.changes).flatMap(([k, v]) =>
      k === "parallel" ? Object.entries(v).filter(([sk]) => ["gpus", "tp", "pp", "zero", "offload"].includes(sk))
      : k === "engine" ? Object.entries(v).map(([sk, sv]) => [`engine.${sk}`, sv]) : [[k, v]]);
    const missing = [];
    for (const [k, v] of pairs) if (!(await shownBy(k, v))) missing.push(k);
    check(pairs.length > 0 && missing.length === 0,
          `every setting the advice changed is shown in the form (${pairs.map((p) => p[0]).join(", ")}; missing: ${missing.join(", ")})`);
    await page.click("#undo-applied");
    await page.waitForFunction(() => document.body.dataset.state === "ready"
      && document.getElementById("verdict").className === "nofit");
    const undone = jobOf(page);
    check(JSON.stringify(undone) === JSON.stringify(nofitJob) && await page.isHidden("#applied"),
          "undo brings the job before the advice back (does not fit again)");
  }

  // The plan view: layouts over 8 GPUs, the best of each framework among them.
  await page.fill("input[name=gpus]", "8");
  await page.selectOption("select[name=gpu]", "h100-80gb");
  // Ready for this job (the form's changes are sent after a short pause).
  await page.waitForFunction(() => document.body.dataset.state === "ready"
    && /"gpus":8\b/.test(decodeURIComponent(location.hash)) && /"gpu":"h100-80gb"/.test(decodeURIComponent(location.hash)));
  await page.click("#plan-btn");
  // The answer's heading and rows arrive together; wait for both (a re-asked plan shows
  // "planning…" again between the two reads under a loaded machine).
  await page.waitForFunction(() => /layouts fit/.test(document.getElementById("plan-out").textContent)
    && document.querySelector("#plan-table tbody tr") !== null, null, { timeout: 60_000 });
  check(/layouts fit/.test(await page.textContent("#plan-out")), "plan lists fitting layouts: "
        + (await page.textContent("#plan-out")).slice(0, 60));
  await page.fill("input[name=gpus]", "1");
  await page.waitForFunction(() => document.body.dataset.state === "ready");

  // Choose a GGUF (the tiny fixture): the page uploads its header, the model selector shows the
  // file, and the peak is the one /api/estimate gives for the job the URL now encodes.
  const gguf = resolve(here, "../../../shared/fixtures/tiny_llama_q8.gguf");
  if (existsSync(gguf)) {
    const old = await page.getAttribute("#peak-bytes", "data-bytes");
    await page.setInputFiles("#file", gguf);
    await page.waitForFunction(() => {
      const s = document.getElementById("model");
      return s.value.startsWith("upload:") && document.body.dataset.state === "ready";
    });
    await page.waitForFunction((o) => document.getElementById("peak-bytes").dataset.bytes !== o, old);
    const label = await page.evaluate(() => { const s = document.getElementById("model"); return s.options[s.selectedIndex].text; });
    check(label.includes("tiny_llama_q8.gguf"), `the chosen GGUF is the model shown (${label})`);
    const j = JSON.parse(decodeURIComponent(new URL(page.url()).hash.slice(5)));
    const est = await (await fetch(new URL("/api/estimate", base), {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(j),
    })).json();
    check(await page.getAttribute("#peak-bytes", "data-bytes") === String(est.per_gpu.peak_allocated),
          `the GGUF's peak is the API's (${est.per_gpu.peak_allocated} bytes)`);
  } else {
    console.log("skip - no ../shared/fixtures/tiny_llama_q8.gguf for the model upload check");
  }

  // Choose a measurement (the real profiler timeline in ../shared/fixtures): the page shows
  // the peak /api/analyze reads from it and overlays it on the picture.
  const rec = resolve(here, "../../../shared/fixtures/cpu_timeline.json");
  if (existsSync(rec)) {
    await page.setInputFiles("#file", rec);
    await page.waitForSelector("#picture svg rect.measured-segment");
    await page.waitForFunction(() => document.body.dataset.state === "ready");
    const { readFileSync } = await import("node:fs");
    const a = await (await fetch(new URL("/api/analyze", base), { method: "POST", body: readFileSync(rec) })).json();
    check(await page.getAttribute("#measured-bytes", "data-bytes") === String(a.per_gpu.peak_allocated),
          `a chosen measurement is overlaid (measured peak ${a.per_gpu.peak_allocated} bytes)`);
    check(await page.isVisible("#measurement-view")
          && /out-of-memory events/.test(await page.textContent("#measurement-view")),
          "the measurement has its own view (peak, categories, allocations, OOMs)");
  } else {
    console.log("skip - no ../shared/fixtures/cpu_timeline.json for the overlay check");
  }

  // Choose a training config (a real DeepSpeed JSON, copied from transformers' docs into the
  // reader's fixtures): the server reads it like --from, the form takes its fields, and the
  // lines saying where each came from (and its "auto" values) are listed.
  const recipes = resolve(here, "../../crates/formats/tests/fixtures/recipes/deepspeed");
  await page.setInputFiles("#file", resolve(recipes, "transformers_ds_config_zero2.json"));
  await page.waitForSelector("#from-out:not([hidden])");
  await page.waitForFunction(() => document.body.dataset.state === "ready");
  const sel = (n) => page.$eval(`[name=${n}]`, (e) => e.value);
  check(await sel("framework") === "deepspeed" && await sel("zero") === "2"
        && await sel("offload") === "optimizer" && await sel("optimizer") === "adamw-fused",
        "a chosen DeepSpeed config sets framework, ZeRO stage, offload and optimizer");
  check(/train_micro_batch_size_per_gpu is "auto"/.test(await page.textContent("#from-notes")),
        "its notes say which keys were \"auto\"");
  // Drop a second one on the page: ZeRO-3 with parameter offload overrides the first.
  const { readFileSync: readText } = await import("node:fs");
  const z3 = readText(resolve(recipes, "transformers_ds_config_zero3.json"), "utf8");
  const dt = await page.evaluateHandle((text) => {
    const d = new DataTransfer();
    d.items.add(new File([text], "ds_zero3.json", { type: "application/json" }));
    return d;
  }, z3);
  await page.dispatchEvent("body", "drop", { dataTransfer: dt });
  await page.waitForFunction(() => document.getElementById("from-names").textContent.includes("ds_zero3.json"));
  await page.waitForFunction(() => document.body.dataset.state === "ready");
  check(await sel("zero") === "3" && await sel("offload") === "optimizer+params",
        "a dropped ZeRO-3 config overrides the first (stage 3, optimizer+params offload)");

  mkdirSync(dirname(shot), { recursive: true });
  await page.screenshot({ path: shot, fullPage: true });
  console.log("screenshot:", shot);

  await surfaces();

  // A diffusers pipeline (the real FLUX.1-dev configs, a directory this loopback server reads
  // as it would a Hub id): the form asks the pipeline's fields, the answer lists the call's
  // phases, and the peak is the one /api/estimate gives for the job the URL encodes.
  const flux = resolve(here, "../../crates/formats/tests/fixtures/diffusers/flux.1-dev");
  await page.fill("#hub", flux);
  await page.press("#hub", "Enter");
  await page.waitForSelector("#pipeline-fields:not([hidden])");
  await page.waitForFunction(() => document.body.dataset.state === "ready"
    && document.querySelector("#phases-table tbody tr") !== null);
  const phases = await page.$$eval("#phases-table tbody tr", (rows) => rows.map((r) => r.dataset.phase));
  check(JSON.stringify(phases) === JSON.stringify(["text_encode:text_encoder", "text_encode:text_encoder_2", "denoise", "vae_decode"]),
        `a pipeline shows its phases (${phases.join(", ")})`);
  check(await page.$$eval("fieldset.lm", (f) => f.every((e) => e.hidden)),
        "a pipeline hides the language-model fields");
  const pipePeak = async () => {
    const j = JSON.parse(decodeURIComponent(new URL(page.url()).hash.slice(5)));
    const r = await (await fetch(new URL("/api/estimate", base), {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(j),
    })).json();
    return [j, r];
  };
  const oldPipe = await page.getAttribute("#peak-bytes", "data-bytes");
  await page.fill("input[name=width]", "768");
  await page.selectOption("select[name=p_offload]", "model");
  await page.check("input[name=vae_tiling]");
  await page.waitForFunction((o) => document.body.dataset.state === "ready"
    && document.getElementById("peak-bytes").dataset.bytes !== o, oldPipe);
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(5))).vae_tiling === true
    && document.body.dataset.state === "ready");
  const [pj, pr] = await pipePeak();
  check(pj.width === 768 && pj.offload === "model" && pj.vae_tiling === true && pj.seq === undefined,
        "the encoded job is the pipeline's (width, offload, VAE tiling; no seq)");
  check(await page.getAttribute("#peak-bytes", "data-bytes") === String(pr.per_gpu.peak_allocated),
        `the pipeline's peak is the API's (${pr.per_gpu.peak_allocated} bytes, in ${pr.per_gpu.peak_phase})`);
  check(await page.getAttribute("#phases-table tr.peak-phase", "data-phase") === pr.per_gpu.peak_phase,
        "the peak's phase is marked");
  await page.click("#fit-btn");
  await page.waitForFunction(() => /largest square side/.test(document.getElementById("fit-out").textContent));
  check(/most images at 768×1024/.test(await page.textContent("#fit-out")),
        "fit answers the most images and the largest side: " + (await page.textContent("#fit-out")).slice(0, 80));
  await page.screenshot({ path: shot.replace(/\.png$/, "-pipeline.png"), fullPage: true });
  // Back to a model: its fields return.
  await page.fill("#hub", "");
  await page.press("#hub", "Enter");
  await page.waitForFunction(() => document.body.dataset.kind === "model" && document.body.dataset.state === "ready");
  check(await page.isVisible("input[name=seq]") && await page.isHidden("#pipeline-fields"),
        "clearing the pipeline brings the model's fields back");
  check(foreign.length === 0, `no request left ${origin} (${foreign.join(", ")})`);
  check(errors.length === 0, `no console errors (${errors.join(" | ")})`);

  // The answers a user copies or reads off the page (issue 31, item 8), each on a fresh page.
  async function surfaces() {
    // A vLLM job: the fit shows the launch line (what vLLM is started with), and the pool is
    // named one way in the table and the legend.
    const vllm = await openJob({ model: "llama-3.1-8b", task: "infer", framework: "vllm", gpu: "h100-80gb", batch: 1 });
    await vllm.click("#fit-btn");
    await vllm.waitForSelector("#fit-launch");
    const fitApi = await api("/api/fit", jobOf(vllm));
    const launch = await vllm.textContent("#fit-launch");
    check(launch === fitApi.launch.command && launch.startsWith("vllm serve "), `the fit shows the launch line (${launch})`);
    const whyShown = await vllm.$$eval("#fit-out .why", (d) => d.map((x) => x.textContent));
    check(Object.keys(fitApi.launch.why).every((f) => whyShown.some((w) => w.startsWith(f + ":"))),
          "and why each flag has its value");
    const pool = await vllm.$eval("#breakdown tr[data-category=allocator_reserve] td", (td) => td.textContent);
    const legend = await vllm.$eval("#picture rect.swatch[data-category=allocator_reserve]", (r) => r.dataset.label);
    const legendText = await vllm.$$eval("#legend text", (t) => t.map((x) => x.textContent).join(" | "));
    check(pool === "KV pool (free blocks)" && legend === pool && legendText.includes(pool),
          `vLLM's pool is "${pool}" in the table and the legend, never "allocator reserve"`);
    await vllm.screenshot({ path: shot.replace(/\.png$/, "-vllm-fit.png"), fullPage: true });

    // Settings with no control of their own (engine settings) are listed and can be removed;
    // the training techniques have controls.
    const rm = vllm;
    await rm.goto(base + "#job=" + encodeURIComponent(JSON.stringify({ model: "llama-3.1-8b", task: "infer", framework: "vllm",
      gpu: "h100-80gb", engine: { max_model_len: 4096 } })));
    await rm.reload();
    await rm.waitForFunction(() => document.body.dataset.state === "ready");
    check(/4096/.test(await rm.textContent("#extras-list li[data-field='engine.max_model_len']")),
          "an engine setting from a link is listed under Other settings");
    await rm.click("#extras-list li[data-field='engine.max_model_len'] button");
    await rm.waitForFunction(() => !location.hash.includes("max_model_len") && document.body.dataset.state === "ready");
    check(jobOf(rm).engine === undefined && await rm.isHidden("#extras"), "and removing it leaves the job without it");
    await rm.close();
    const tech = await openJob({ model: "llama-3.1-8b", gpu: "h100-80gb", optimizer: "adamw-8bit-paged",
      optimizer_in_backward: true, allocator: "expandable_segments:True", loss: "chunked" });
    const v = (n) => tech.$eval(`[name=${n}]`, (e) => (e.type === "checkbox" ? e.checked : e.value));
    check(await v("optimizer") === "adamw-8bit-paged" && await v("optimizer_in_backward") === true
          && await v("alloc_conf") === "expandable_segments:True" && await v("loss") === "chunked",
          "paged optimizers, optimizer-in-backward, the allocator's settings and the loss each have a control");
    await tech.uncheck("input[name=optimizer_in_backward]");
    await tech.waitForFunction(() => document.body.dataset.state === "ready"
      && !decodeURIComponent(location.hash).includes("optimizer_in_backward"));
    const unticked = jobOf(tech);
    check(unticked.optimizer_in_backward === undefined && unticked.optimizer === "adamw-8bit-paged",
          "unticking optimizer-in-backward takes it (alone) out of the job");
    await tech.close();

    // Labels whole and inside the picture: an 8B full fine-tune on a 24 GB card (150 GiB used:
    // the capacity line sits at a sixth of the bar; the what-if names run long).
    const big = await openJob({ model: "llama-3.1-8b", gpu: "rtx4090-24gb" });
    const texts = await big.$$eval("#picture svg text", (ts) => ts.map((t) => {
      const b = t.getBBox();
      return { s: t.textContent, x0: b.x, x1: b.x + b.width, cls: t.getAttribute("class") || "" };
    }));
    const out = texts.filter((t) => t.x0 < 0 || t.x1 > 960);
    check(out.length === 0, `every label of the picture lies inside it (${out.map((t) => t.s).join(" | ")})`);
    const names = (await api("/api/whatif", jobOf(big))).map((w) => w.technique);
    const labels = texts.filter((t) => t.cls === "what-if-label").map((t) => t.s).join(" ");
    const cut = names.filter((n) => !labels.includes(n));
    check(names.some((n) => n.length > 44) && cut.length === 0,
          `every what-if name is whole in the picture (${cut.join(" | ")})`);
    const cap = texts.find((t) => t.cls === "capacity-label");
    const zero = texts.find((t) => t.s === "0");
    check(cap && zero && (cap.x0 >= zero.x1 || cap.x1 <= zero.x0), `the capacity label clears the axis (${cap && cap.s})`);
    await big.screenshot({ path: shot.replace(/\.png$/, "-labels.png"), fullPage: true });

    // The plan: the time and tokens/s columns it ranks by; the best row labelled, not repeated.
    await big.fill("input[name=gpus]", "8");
    await big.selectOption("select[name=gpu]", "h100-80gb");
    await big.waitForFunction(() => document.body.dataset.state === "ready"
      && /"gpus":8\b/.test(decodeURIComponent(location.hash)) && /"gpu":"h100-80gb"/.test(decodeURIComponent(location.hash)));
    await big.click("#plan-btn");
    await big.waitForSelector("#plan-table tbody tr", { timeout: 60_000 });
    const ph = await big.$$eval("#plan-table thead th", (t) => t.map((x) => x.textContent));
    check(ph.includes("step") && ph.includes("tok/s/GPU") && ph.includes("bound by"), `plan has step, tok/s/GPU and bound-by columns`);
    check(await big.evaluate(() => {
      const t = document.getElementById("plan-table").getBoundingClientRect();
      return t.right <= document.getElementById("plan-out").getBoundingClientRect().right;
    }) && await noSideways(big), "the plan's table fits its panel and the page");
    const prow = await big.$$eval("#plan-table tbody tr", (trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
    const layouts = prow.map((r) => r.slice(1, 9).join("|"));
    check(new Set(layouts).size === layouts.length, "no layout is listed twice");
    check(/^1 · best of /.test(prow[0][0]), `the best row is labelled (${prow[0][0]})`);
    const tok = ph.indexOf("tok/s/GPU");
    const ranked = prow.filter((r) => /^\d/.test(r[0])).map((r) => Number(r[tok].replace(/,/g, "")));
    check(ranked.every((t, i) => i === 0 || t <= ranked[i - 1]), `the ranked rows go by tokens/s per GPU (${ranked.join(", ")})`);
    await big.close();

    // The step plot scaled to the job: GPT-2 at batch 4 × 512 in fp32 (under 6 GiB) on an H200
    // (140.4 GiB): the plot stands for the peak × 1.08, so the peak's column is 220 / 1.08 =
    // 203.7 px of the 220 px plot (scaled to the capacity it would be ~9 px), the capacity said.
    const h200 = await openJob({ model: "gpt2", gpu: "h200-141gb", batch: 4, seq: 512, precision: "fp32", optimizer: "adamw" });
    const tallest = await h200.$$eval("#timeline rect.step", (rs) => {
      const cols = {};
      for (const r of rs) cols[r.getAttribute("x")] = (cols[r.getAttribute("x")] || 0) + Number(r.getAttribute("height"));
      return Math.max(...Object.values(cols));
    });
    check(Math.abs(tallest - 203.7) < 1, `the step plot is scaled to the step (tallest column ${tallest.toFixed(1)} px of 220)`);
    check(/GPU capacity 140\.4 GiB is above this plot/.test(await h200.textContent("#picture")), "the capacity is marked above it");

    // The measurement view: a real H200 snapshot's segments and replayed allocator as rows, no
    // raw JSON, and the page no wider than its window.
    const snap = resolve(here, "../../../shared/fixtures/gpu-h200/snapshot-gpt2-snap-fp32-adamw-eager-b4s512.pickle");
    if (existsSync(snap)) {
      await h200.setInputFiles("#file", snap);
      await h200.waitForSelector("#measurement-fragmentation");
      await h200.waitForFunction(() => document.body.dataset.state === "ready" && document.querySelector("#picture svg polyline.measured"));
      const view = await h200.textContent("#measurement-view");
      check(!/[{}]/.test(view), "the measurement view has no raw JSON");
      // Its segments at the end (the record's own: 143 segments; analyze prints the same).
      check(/segments143/.test(view.replace(/\s+/g, "")), "the segments are rows (143 segments)");
      // docs/analyze.md: with expandable segments this run would have reserved 6,620,708,864 −
      // 6,358,564,864 = 262,144,000 B = 250.0 MiB less.
      const ex = await h200.$eval("#measurement-allocator-whatif", (t) => [...t.rows].map((r) => r.textContent).join(" | "));
      check(/expandable_segments:True.*250\.0 MiB less/.test(ex), `the allocator's what-ifs are rows (${ex.slice(0, 120)})`);
      check(await noSideways(h200), "the page is no wider than its window with the measurement shown");
      await h200.screenshot({ path: shot.replace(/\.png$/, "-measurement.png"), fullPage: true });
    } else {
      console.log("skip - no ../shared/fixtures/gpu-h200 snapshot for the measurement view check");
    }
    await h200.close();

    // PyTorch's out-of-memory message (a real one, in the log readers' fixtures): its figures
    // and the allocator's hint as rows, read off the message itself: "Tried to allocate 3.00
    // GiB ... 4.84 GiB is reserved by PyTorch but unallocated".
    const oomPage = await openJob({ model: "gpt2", gpu: "rtx4090-24gb" });
    await oomPage.setInputFiles("#file", resolve(here, "../../crates/measure/tests/fixtures/logs/torch-oom/torch2.1-capacty-fragmentation-lerf73.txt"));
    await oomPage.waitForSelector("#measurement-oom-message");
    await oomPage.waitForFunction(() => document.body.dataset.state === "ready");
    const msg = (await oomPage.textContent("#measurement-oom-message")).replace(/\s+/g, " ");
    const hint = (await oomPage.textContent("#measurement-allocator")).replace(/\s+/g, " ");
    check(/tried to allocate ?3\.00 GiB/.test(msg) && /reserved but unallocated ?4\.84 GiB/.test(msg)
          && hint.includes("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") && /at most ?4\.84 GiB/.test(hint)
          && !/[{}]/.test(await oomPage.textContent("#measurement-view")),
          "an out-of-memory message's figures and the allocator's hint are rows");
    check(await noSideways(oomPage), "the page is no wider than its window with the message shown");
    await oomPage.close();

    // A training config naming a model that cannot be fetched: the previous picture and verdict
    // go, and the verdict says why.
    const gone = await openJob({ model: "gpt2", gpu: "h100-80gb" });
    check(await gone.locator("#picture svg").count() === 1, "a picture is on show before the drop");
    const { readFileSync } = await import("node:fs");
    const yml = readFileSync(resolve(here, "../../crates/formats/tests/fixtures/recipes/axolotl/llama3_lora-8b.yml"), "utf8")
      .replace(/^base_model: .*$/m, "base_model: vramscope-test/no-such-model");
    refusalsExpected = true;
    const drop = await gone.evaluateHandle((text) => {
      const d = new DataTransfer();
      d.items.add(new File([text], "no_such_model.yml", { type: "application/x-yaml" }));
      return d;
    }, yml);
    await gone.dispatchEvent("body", "drop", { dataTransfer: drop });
    await gone.waitForFunction(() => document.body.dataset.state === "error");
    const verdict = await gone.textContent("#verdict");
    check(await gone.locator("#picture svg").count() === 0 && await gone.textContent("#peak-gib") === "–"
          && await gone.locator("#breakdown tbody tr").count() === 0 && /^no estimate: \S.{20,}/.test(verdict),
          `the old picture and verdict are gone, and why is said (${verdict.slice(0, 140)})`);
    await gone.screenshot({ path: shot.replace(/\.png$/, "-unfetchable.png"), fullPage: true });
    await gone.close(); // its refused requests (the estimate's, the picture's) end with it
    refusalsExpected = false;
  }
} catch (e) {
  failed = true;
  console.error("FAIL:", e.message);
} finally {
  await browser.close().catch(() => {});
  clearTimeout(watchdog);
}
process.exit(failed ? 1 : 0);
