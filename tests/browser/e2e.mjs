// End-to-end test of the web UI in a real browser: Debian's chromium, headless, driven by
// playwright-core. Loads the page from a running `vramscope serve`, changes the batch, and
// checks that the peak the page shows becomes the one POST /api/estimate returns for the job
// the page encodes in its URL. Also: the page requests nothing from another origin, and the
// fit and what-if buttons answer (in view), answers are asked again when the job changes,
// fields follow the task, advice rows apply when clicked, the plan view lists layouts, a chosen
// GGUF becomes the model and a measurement gets its own view, a diffusers pipeline asks its own
// fields and shows its phases. Saves a screenshot (a CI artifact).
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
  const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  page.setDefaultTimeout(STEP);
  const foreign = [];
  const errors = [];
  page.on("request", (r) => { if (!r.url().startsWith(origin) && !r.url().startsWith("data:")) foreign.push(r.url()); });
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("response", async (r) => {
    if (r.status() >= 400) errors.push(`${r.status()} ${r.url()}: ${await r.text().catch(() => "")}`);
  });

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
  await page.click("#advice-table tbody tr");
  await page.waitForFunction(() => document.body.dataset.state === "ready"
    && document.getElementById("verdict").className === "fits");
  check(true, "the first advice, clicked, fits: " + await page.textContent("#verdict"));

  // The plan view: layouts over 8 GPUs, the best of each framework among them.
  await page.fill("input[name=gpus]", "8");
  await page.selectOption("select[name=gpu]", "h100-80gb");
  await page.waitForFunction(() => document.body.dataset.state === "ready");
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
} catch (e) {
  failed = true;
  console.error("FAIL:", e.message);
} finally {
  await browser.close().catch(() => {});
  clearTimeout(watchdog);
}
process.exit(failed ? 1 : 0);
