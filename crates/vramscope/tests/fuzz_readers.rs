//! The readers' fuzz targets (issue #35), bounded so they run in CI: every reader of a file a
//! user hands vramscope is fed mutations of real inputs — the project's fixtures (`../shared/
//! fixtures`, the crates' `tests/fixtures`, the compiled-in presets) — and must not panic,
//! must answer bad input with a one-line error (control bytes escaped as the CLI prints them),
//! and must not hang; then mutated files go through the binary. The mutator
//! (`fuzz_mutate/`) is deterministic: the same seed gives the same inputs.
//!
//! `cargo test -p vramscope --test fuzz_readers -- --nocapture` prints the figures.
//! `VRAMSCOPE_FUZZ_RUNS=N` sets the mutated runs per reader (default 1000),
//! `VRAMSCOPE_FUZZ_CLI=N` the mutated files run through the binary (default 600),
//! `VRAMSCOPE_FUZZ_SEED=N` changes the random stream, `VRAMSCOPE_FUZZ_SLOWEST=DIR` writes
//! each reader's slowest input there.

mod common;
mod fuzz_mutate;
use common::shared;
use fuzz_mutate::{mutant, Rng};

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vramscope::app::escape_controls;
use vramscope_formats::{diffusers, gguf, hf_config, recipes, safetensors};

/// A single run past this is a failure: the slowest real input takes well under a second in
/// a debug build; this only catches a hang or a blow-up, the table reports the real maximum.
const RUN_LIMIT: Duration = Duration::from_secs(10);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one reader's runs came to.
#[derive(Default)]
struct Figures {
    name: &'static str,
    runs: u64,
    ok: u64,
    err: u64,
    max: Duration,
    total: Duration,
    slowest: Vec<u8>,
    failures: Vec<String>,
}

/// The error as the CLI prints it (through `escape_controls`: readers may quote the input's
/// own bytes, newlines included) must be a non-empty line with no raw control character. The
/// binary sample below checks the real stderr.
fn bad_message(msg: &str) -> Option<String> {
    let shown = escape_controls(msg);
    let raw = shown
        .chars()
        .any(|c| c.is_control() && c != '\t' || c == '\u{2028}');
    (shown.trim().is_empty() || raw).then(|| format!("bad error message {shown:?}"))
}

type Reader = Box<dyn Fn(&[u8]) -> Result<(), String>>;

/// One fuzz target: a reader, its seeds, its share of the runs (in quarters: slow readers
/// fewer), how a mutant is encoded before it is read (outside the timing: gzip) and whether
/// every seed must be read (false where a fixture is itself malformed on purpose).
struct Target {
    name: &'static str,
    seeds: Vec<Vec<u8>>,
    quarters: u64,
    reader: Reader,
    encode: fn(Vec<u8>) -> Vec<u8>,
    seeds_read: bool,
}

fn target(name: &'static str, seeds: Vec<Vec<u8>>, quarters: u64, reader: Reader) -> Target {
    Target {
        name,
        seeds,
        quarters,
        reader,
        encode: |b| b,
        seeds_read: true,
    }
}

/// Runs the target's reader on every seed and `runs` mutants; a panic, a bad message or a run
/// past `RUN_LIMIT` is recorded with the input's first bytes (the seed reproduces it).
fn fuzz(t: &Target, runs: u64, rng: &mut Rng) -> Figures {
    let (name, seeds) = (t.name, &t.seeds);
    assert!(!seeds.is_empty(), "{name}: no seeds");
    let mut f = Figures {
        name,
        ..Figures::default()
    };
    let inputs = seeds
        .clone()
        .into_iter()
        .map(Some)
        .chain((0..runs).map(|_| None));
    for (i, input) in inputs.enumerate() {
        let input = (t.encode)(input.unwrap_or_else(|| mutant(rng, seeds)));
        let start = Instant::now();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (t.reader)(&input)));
        let took = start.elapsed();
        f.runs += 1;
        f.total += took;
        if took >= f.max {
            f.max = took;
            f.slowest = input.clone();
        }
        let head = String::from_utf8_lossy(&input[..input.len().min(80)]).into_owned();
        // The real inputs themselves must be read: a reader wired wrongly fails here.
        let seed_refused = (t.seeds_read && i < seeds.len() && !matches!(r, Ok(Ok(()))))
            .then(|| "an unmutated seed was refused".to_string());
        let problem = match r {
            Ok(Ok(())) => {
                f.ok += 1;
                None
            }
            Ok(Err(e)) => {
                f.err += 1;
                bad_message(&e)
            }
            Err(_) => Some("panicked".to_string()),
        };
        let slow = (took > RUN_LIMIT).then(|| format!("took {took:?}"));
        for p in problem.into_iter().chain(seed_refused).chain(slow) {
            f.failures.push(format!("{name} run {i} ({head:?}…): {p}"));
        }
    }
    f
}

fn fixtures_dir() -> PathBuf {
    shared(PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures"
    )))
}

fn crate_dir(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(rel)
}

/// The files under `dir` (recursively) whose names end with one of `exts`, sorted.
fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p, exts));
        } else if exts.iter().any(|x| p.to_string_lossy().ends_with(x)) {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn read_all(paths: &[PathBuf]) -> Vec<Vec<u8>> {
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// config.json: the tiny Llama's and the families' fixtures, a few presets.
fn config_seeds() -> Vec<Vec<u8>> {
    let mut p = vec![fixtures_dir().join("hf_tiny_llama/config.json")];
    for dir in ["formats/tests/fixtures/moe", "formats/tests/fixtures/vlm"] {
        p.extend(files(&crate_dir(dir), &[".json"]).into_iter().take(4));
    }
    for preset in ["gpt2", "t5-small", "qwen3-30b-a3b", "gemma-2-2b"] {
        p.push(crate_dir(&format!("formats/data/presets/{preset}.json")));
    }
    read_all(&p)
}

fn read_config(b: &[u8]) -> Result<(), String> {
    hf_config::parse_config_str(&text(b), "config.json")
        .map(drop)
        .map_err(|e| e.to_string())
}

fn read_safetensors(b: &[u8]) -> Result<(), String> {
    let h = safetensors::read_header(Cursor::new(b), b.len() as u64, "model.safetensors")
        .map_err(|e| e.to_string())?;
    safetensors::checkpoint_of_files(vec![("model.safetensors".into(), h)])
        .map(drop)
        .map_err(|e| e.to_string())
}

fn read_safetensors_index(b: &[u8]) -> Result<(), String> {
    safetensors::parse_index(&text(b), "model.safetensors.index.json")
        .map(drop)
        .map_err(|e| e.to_string())
}

fn read_gguf(b: &[u8]) -> Result<(), String> {
    let g =
        gguf::read_gguf(Cursor::new(b), b.len() as u64, "model.gguf").map_err(|e| e.to_string())?;
    let _ = g.summary();
    g.inventory().map(drop).map_err(|e| e.to_string())
}

/// The diffusers pipelines' fixture directories.
fn pipelines() -> Vec<PathBuf> {
    files(
        &crate_dir("formats/tests/fixtures/diffusers"),
        &["model_index.json"],
    )
    .into_iter()
    .map(|p| p.parent().unwrap().to_path_buf())
    .collect()
}

/// A pipeline from `index` with each component's config read from `dir`, or `mutated` in
/// place of the component `which` when given.
fn read_pipeline(index: &str, dir: &Path, mutated: Option<(&str, &str)>) -> Result<(), String> {
    diffusers::pipeline_from_texts(index, "model_index.json", |name| {
        let path = format!("{name}/config.json");
        let t = match mutated {
            Some((which, t)) if which == name => t.to_string(),
            _ => std::fs::read_to_string(dir.join(&path)).unwrap_or_default(),
        };
        Ok((t, path))
    })
    .map(drop)
    .map_err(|e| e.to_string())
}

fn read_recipe(b: &[u8]) -> Result<(), String> {
    let input = recipes::Input {
        name: "recipe.yaml".into(),
        text: text(b),
    };
    let m = recipes::parse(&input).map_err(|e| e.to_string())?;
    let _ = recipes::detect(&m);
    recipes::resolve(&[input], &|_, _| None)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Jobs: the validation cases' own `job` objects (a sample of them).
fn job_seeds() -> Vec<Vec<u8>> {
    let path = shared(PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/validation/dev-cases.json"
    )));
    let cases: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let cases = cases.as_array().unwrap();
    let step = (cases.len() / 24).max(1);
    cases
        .iter()
        .step_by(step)
        .map(|c| serde_json::to_vec_pretty(&c["job"]).unwrap())
        .collect()
}

fn read_job(b: &[u8]) -> Result<(), String> {
    let job: vramscope_core::job::Job =
        serde_json::from_slice(b).map_err(|e| format!("job: {e}"))?;
    job.resolve(None).map(drop).map_err(|e| e.to_string())
}

fn read_record(b: &[u8]) -> Result<(), String> {
    vramscope_measure::analyze_bytes(b)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn gzip(b: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(b).unwrap();
    z.finish().unwrap()
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn read_log(b: &[u8]) -> Result<(), String> {
    let _ = vramscope_measure::logs::read_log(&text(b));
    vramscope_measure::logs::analyze_any_bytes(b)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn log_seeds() -> Vec<Vec<u8>> {
    read_all(&files(
        &crate_dir("measure/tests/fixtures/logs"),
        &[".log", ".txt"],
    ))
}

/// model_index.json: each pipeline's index, read with the component configs of the pipeline
/// whose class name the mutant still carries.
fn diffusers_index_target() -> Target {
    let dirs = pipelines();
    let seeds = read_all(
        &dirs
            .iter()
            .map(|d| d.join("model_index.json"))
            .collect::<Vec<_>>(),
    );
    let classes: Vec<(String, PathBuf)> = seeds
        .iter()
        .zip(&dirs)
        .map(|(s, d)| {
            let v: serde_json::Value = serde_json::from_slice(s).unwrap();
            (v["_class_name"].as_str().unwrap().to_string(), d.clone())
        })
        .collect();
    let reader = move |b: &[u8]| {
        let index = text(b);
        let dir = classes
            .iter()
            .find(|(c, _)| index.contains(c.as_str()))
            .map_or(&classes[0].1, |(_, d)| d);
        read_pipeline(&index, dir, None)
    };
    target("diffusers model_index", seeds, 4, Box::new(reader))
}

/// A component's config.json inside a pipeline: the mutant stands in for one component of
/// each of three pipelines (a transformer, a UNet, a VAE, a T5 encoder).
fn diffusers_component_target() -> Target {
    let root = crate_dir("formats/tests/fixtures/diffusers");
    let slots: Vec<(PathBuf, &str)> = vec![
        (root.join("flux.1-dev"), "transformer"),
        (root.join("sdxl-base-1.0"), "unet"),
        (root.join("sdxl-base-1.0"), "vae"),
        (root.join("sd3.5-medium"), "text_encoder_3"),
    ];
    let seeds = read_all(
        &slots
            .iter()
            .map(|(d, c)| d.join(c).join("config.json"))
            .collect::<Vec<_>>(),
    );
    let reader = move |b: &[u8]| {
        let t = text(b);
        let mut first = None;
        for (dir, comp) in &slots {
            let index = std::fs::read_to_string(dir.join("model_index.json")).unwrap();
            match read_pipeline(&index, dir, Some((comp, &t))) {
                Ok(()) => return Ok(()),
                Err(e) => first = first.or(Some(e)),
            }
        }
        Err(first.unwrap())
    };
    target("diffusers component config", seeds, 4, Box::new(reader))
}

/// Every reader with its seeds.
fn targets() -> Vec<Target> {
    let fx = fixtures_dir();
    let recipe_files = files(
        &crate_dir("formats/tests/fixtures/recipes"),
        &[".yaml", ".yml", ".json", ".toml"],
    );
    let shards = files(&fx.join("hf_tiny_llama"), &[".safetensors"]);
    let pickles = [
        "cpu_only_empty_cuda_snapshot.pickle",
        "real-snapshots/angelolmn__HitsBE__my_snapshot_empty.pickle",
        "real-snapshots/Maphsge4__select_n__snapshot_b890bc5.pickle",
        "real-snapshots/jogregoire__How-Diffusion-Models-Work__my_snapshot.pickle",
    ];
    let trace = std::fs::read(fx.join("cpu_chrome_trace_mlp.json")).unwrap();
    let gz = read_all(&[
        fx.join("cpu_timeline.json.gz"),
        fx.join("cpu_timeline.raw.json.gz"),
    ]);
    let timeline = gunzip(&gz[0]);
    vec![
        target("config.json", config_seeds(), 4, Box::new(read_config)),
        target(
            "safetensors header",
            read_all(&shards),
            4,
            Box::new(read_safetensors),
        ),
        target(
            "safetensors index.json",
            read_all(&[fx.join("hf_tiny_llama/model.safetensors.index.json")]),
            4,
            Box::new(read_safetensors_index),
        ),
        target(
            "GGUF",
            read_all(&[fx.join("tiny_llama_q8.gguf")]),
            4,
            Box::new(read_gguf),
        ),
        diffusers_index_target(),
        diffusers_component_target(),
        target(
            "recipe (YAML/JSON/TOML)",
            read_all(&recipe_files),
            4,
            Box::new(read_recipe),
        ),
        target("job JSON", job_seeds(), 4, Box::new(read_job)),
        target(
            "snapshot pickle",
            read_all(&pickles.map(|p| fx.join(p))),
            2,
            Box::new(read_record),
        ),
        target(
            "Chrome trace / timeline JSON",
            vec![trace, timeline.clone()],
            1,
            Box::new(read_record),
        ),
        Target {
            encode: |b| gzip(&b),
            ..target(
                "trace .json.gz (inflated mutated)",
                vec![timeline],
                1,
                Box::new(read_record),
            )
        },
        target("trace .json.gz (raw bytes)", gz, 2, Box::new(read_record)),
        Target {
            seeds_read: false, // llamacpp/synthetic-malformed.log: `33/0` layers, refused
            ..target(
                "engine log / OOM message",
                log_seeds(),
                4,
                Box::new(read_log),
            )
        },
    ]
}

/// This process's peak resident set (`VmHWM` in /proc/self/status), in MiB.
fn peak_rss_mib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

#[test]
fn every_reader_survives_mutated_fixtures() {
    let base = env_u64("VRAMSCOPE_FUZZ_RUNS", 1000);
    let mut rng = Rng(env_u64("VRAMSCOPE_FUZZ_SEED", 0x5EED_0035) | 1);
    let t = Instant::now();
    let figures: Vec<Figures> = targets()
        .into_iter()
        .map(|tg| fuzz(&tg, base * tg.quarters / 4, &mut rng))
        .collect();
    println!("| reader | runs | ok | error | panics/bad | max time | total |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for f in &figures {
        println!(
            "| {} | {} | {} | {} | {} | {:.0} ms | {:.1} s |",
            f.name,
            f.runs,
            f.ok,
            f.err,
            f.failures.len(),
            f.max.as_secs_f64() * 1e3,
            f.total.as_secs_f64()
        );
        if let Ok(dir) = std::env::var("VRAMSCOPE_FUZZ_SLOWEST") {
            let name: String = f.name.chars().filter(char::is_ascii_alphanumeric).collect();
            std::fs::write(Path::new(&dir).join(name), &f.slowest).unwrap();
        }
    }
    let total: u64 = figures.iter().map(|f| f.runs).sum();
    println!(
        "{total} runs in {:.1} s, peak RSS {} MiB",
        t.elapsed().as_secs_f64(),
        peak_rss_mib().map_or("?".into(), |m| m.to_string())
    );
    let failures: Vec<&String> = figures.iter().flat_map(|f| &f.failures).collect();
    assert!(
        failures.is_empty(),
        "{} failures:\n{failures:#?}",
        failures.len()
    );
}

/// The command that reads a mutant of `target` through the binary, and the file name it needs.
fn cli_of(target: &str) -> Option<(&'static str, Vec<&'static str>)> {
    Some(match target {
        "config.json" => ("config.json", vec!["inspect", "FILE", "--json"]),
        "safetensors header" => ("model.safetensors", vec!["inspect", "FILE", "--json"]),
        "GGUF" => ("model.gguf", vec!["inspect", "FILE", "--json"]),
        "recipe (YAML/JSON/TOML)" => (
            "recipe.yaml",
            vec!["estimate", "llama-3.2-1b", "--from", "FILE"],
        ),
        "job JSON" => ("job.json", vec!["estimate", "--job", "FILE", "--json"]),
        "snapshot pickle" => ("snapshot.pickle", vec!["analyze", "FILE", "--json"]),
        "Chrome trace / timeline JSON" => ("trace.json", vec!["analyze", "FILE"]),
        "trace .json.gz (raw bytes)" => ("trace.json.gz", vec!["analyze", "FILE", "--json"]),
        "engine log / OOM message" => ("engine.log", vec!["analyze", "FILE"]),
        _ => return None,
    })
}

/// What one run of the binary came to: its exit code (None: killed by a signal or the
/// watchdog), its stderr and its time.
fn run_binary(args: &[String], limit: Duration) -> (Option<i32>, Vec<u8>, Duration) {
    use std::process::{Command, Stdio};
    let t = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut err = Vec::new();
        std::io::Read::read_to_end(&mut pipe, &mut err)
            .map(|_| err)
            .unwrap_or_default()
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let err = reader.join().unwrap();
    (status.and_then(|s| s.code()), err, t.elapsed())
}

/// The peak resident set of any waited-for child (`getrusage(RUSAGE_CHILDREN)`), in MiB.
fn children_peak_rss_mib() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    assert_eq!(rc, 0, "getrusage failed");
    u.ru_maxrss as u64 / 1024
}

/// A problem with what the binary said: an exit code outside {0, 1, 2}, or on exit 2 a
/// stderr that is not one line free of raw control bytes.
fn cli_problem(code: Option<i32>, err: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(err);
    match code {
        Some(0 | 1) => None,
        Some(2) if text.trim_end().lines().count() != 1 => Some(format!("not one line: {text:?}")),
        Some(2) if text.trim_end().chars().any(|c| c.is_control() && c != '\t') => {
            Some(format!("raw control bytes: {text:?}"))
        }
        Some(2) => None,
        other => Some(format!("exit {other:?}: {text:?}")),
    }
}

#[test]
fn the_binary_reads_mutated_files_with_exit_0_1_or_2() {
    let n = env_u64("VRAMSCOPE_FUZZ_CLI", 600);
    let mut rng = Rng(env_u64("VRAMSCOPE_FUZZ_SEED", 0x5EED_0035) ^ 0xC11 | 1);
    let kinds: Vec<(Target, (&str, Vec<&str>))> = targets()
        .into_iter()
        .filter_map(|t| cli_of(t.name).map(|c| (t, c)))
        .collect();
    let dir = std::env::temp_dir().join(format!("vramscope-fuzz-{}", std::process::id()));
    let (mut codes, mut max, mut failures) = ([0u64; 3], Duration::ZERO, Vec::new());
    for i in 0..n as usize {
        let (t, (file, args)) = &kinds[i % kinds.len()];
        let run_dir = dir.join(i.to_string());
        std::fs::create_dir_all(&run_dir).unwrap();
        let path = run_dir.join(file);
        std::fs::write(&path, (t.encode)(mutant(&mut rng, &t.seeds))).unwrap();
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                if *a == "FILE" {
                    path.display().to_string()
                } else {
                    a.to_string()
                }
            })
            .collect();
        let (code, err, took) = run_binary(&args, Duration::from_secs(60));
        max = max.max(took);
        if let Some(c @ 0..=2) = code {
            codes[c as usize] += 1;
        }
        match cli_problem(code, &err) {
            Some(p) => failures.push(format!("{args:?} ({}): {p}", path.display())),
            None => drop(std::fs::remove_dir_all(&run_dir)),
        }
    }
    println!(
        "CLI sample: {n} mutated files through the binary, exit 0/1/2: {}/{}/{}, max time {:.0} ms, \
         peak RSS {} MiB",
        codes[0],
        codes[1],
        codes[2],
        max.as_secs_f64() * 1e3,
        children_peak_rss_mib()
    );
    assert!(failures.is_empty(), "{failures:#?} (inputs kept)");
}
