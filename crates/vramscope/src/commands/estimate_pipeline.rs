//! `vramscope estimate MODEL` and `vramscope fit MODEL` when MODEL names a diffusers pipeline
//! (a directory with `model_index.json`, or a Hub repo whose listing has one): the diffusion
//! job (`vramscope_core::diffusion::job`) from a JSON/TOML job file and the flags, its report
//! by phase (`app::diffusion`), and the largest batch / resolution that fit.

use super::jobargs::{JobArgs, JobError};
use super::CmdResult;
use crate::app::diffusion::{estimate, fit, pipeline_of};
use crate::app::AppError;
use crate::output::{paint, print, print_json, BOLD, HEADER};
use crate::units::{bytes, short_count};
use clap::Args;
use vramscope_core::diffusion::estimate::DiffusionReport;
use vramscope_core::diffusion::fit::DiffusionFit;
use vramscope_core::diffusion::job::{DiffusionJob, Offload};
use vramscope_hub::ResolvedPipeline;

/// The flags only a diffusion pipeline reads (its other fields use the job's own flags:
/// `--batch` images per call, `--precision` bf16/fp16/fp32, `--offload none|model|sequential`,
/// `--attention`, `--gpu`, `--reserve`).
#[derive(Debug, Clone, Default, Args)]
pub struct DiffusionArgs {
    /// Diffusion pipelines: image width in pixels (a multiple of VAE scale × patch). [default: 1024]
    #[arg(long, help_heading = "Diffusion")]
    pub width: Option<String>,
    /// Diffusion pipelines: image height in pixels. [default: 1024]
    #[arg(long, help_heading = "Diffusion")]
    pub height: Option<String>,
    /// Diffusion pipelines: classifier-free guidance, `on` or `off` (on doubles the denoiser's
    /// batch for SDXL and SD3; Flux is guidance-distilled). [default: on; Flux off]
    #[arg(long, value_name = "on|off", help_heading = "Diffusion")]
    pub cfg: Option<String>,
    /// Diffusion pipelines: `enable_vae_tiling()` (decode `sample_size` tiles one at a time).
    #[arg(long, help_heading = "Diffusion")]
    pub vae_tiling: bool,
    /// Diffusion pipelines: `enable_vae_slicing()` (decode one image at a time).
    #[arg(long, help_heading = "Diffusion")]
    pub vae_slicing: bool,
    /// Diffusion pipelines: T5's prompt length (`max_sequence_length`). [default: Flux 512, SD3 256]
    #[arg(long, value_name = "N", help_heading = "Diffusion")]
    pub max_sequence_length: Option<String>,
    /// SD3: run without the T5 encoder (`text_encoder_3=None`).
    #[arg(long, help_heading = "Diffusion")]
    pub drop_t5: bool,
    /// Diffusion `--task train`: the square training side (`--resolution`).
    /// [default: Flux, SD3 512]
    #[arg(long, value_name = "PX", help_heading = "Diffusion")]
    pub resolution: Option<String>,
    /// Diffusion `--task train`: latents encoded once (`--cache_latents`): the VAE is deleted.
    #[arg(long, help_heading = "Diffusion")]
    pub cache_latents: bool,
    /// Diffusion `--task train`: per-image captions (`--caption_column`): the text encoders
    /// stay on the GPU and encode each batch.
    #[arg(long, help_heading = "Diffusion")]
    pub custom_prompts: bool,
}

/// The job file's text as JSON (TOML converted), when `--job` is given.
fn job_file(args: &JobArgs) -> Result<Option<serde_json::Value>, JobError> {
    let Some(path) = &args.job else {
        return Ok(None);
    };
    let shown = path.display();
    let cap = crate::app::jobtext::file::MAX_JOB_FILE_BYTES;
    let text = vramscope_formats::files::read_regular_text(path, cap, "a job file")
        .map_err(|e| JobError(format!("{shown}: {e}")))?;
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
        return Ok(Some(v));
    }
    toml::from_str::<serde_json::Value>(&text)
        .map(Some)
        .map_err(|_| JobError(format!("{shown}: neither JSON nor TOML")))
}

/// The pipeline the job names (MODEL first, then the job file's `model`), if it names one: a
/// directory with `model_index.json` or a Hub repo whose listing has one.
pub fn pipeline_target(
    s: &crate::app::Session,
    args: &JobArgs,
) -> Result<Option<ResolvedPipeline>, AppError> {
    if let Some(m) = &args.model {
        return pipeline_of(s, m, args.assume_llama);
    }
    match job_file(args).ok().flatten() {
        Some(v) => crate::app::diffusion::pipeline_of_job(s, &v),
        None => Ok(None),
    }
}

fn num(field: &str, s: &Option<String>) -> Result<Option<f64>, JobError> {
    s.as_deref()
        .map(|t| {
            t.trim()
                .parse::<f64>()
                .map_err(|_| JobError(format!("{field}: not a number ('{t}')")))
        })
        .transpose()
}

/// Flags of the language-model job a pipeline has no use for: refused, named, rather than
/// ignored.
fn refuse_unused(args: &JobArgs) -> Result<(), JobError> {
    let unused = [
        ("--seq", args.seq.is_some()),
        ("--new-tokens", args.new_tokens.is_some()),
        ("--weights", args.weights.is_some()),
        ("--framework", args.framework.is_some()),
        ("--kv-dtype", args.kv_dtype.is_some()),
        ("--grad-accum", args.grad_accum.is_some()),
        ("--images", args.images.is_some()),
        ("--gpus", args.gpus.is_some()),
        ("--tp", args.tp.is_some()),
        ("--qlora", args.qlora.is_some()),
        ("--from", !args.from.is_empty()),
    ];
    match unused.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(JobError(format!(
            "{flag}: not a field of a diffusion pipeline job (see docs/diffusion.md)"
        ))),
        None => Ok(()),
    }
}

/// The diffusion job: the job file's fields with the flags laid over them.
fn diffusion_job(args: &JobArgs, d: &DiffusionArgs) -> Result<DiffusionJob, JobError> {
    refuse_unused(args)?;
    let mut job: DiffusionJob = match job_file(args)? {
        Some(v) => serde_json::from_value(v)
            .map_err(|e| JobError(format!("invalid diffusion job: {e}").replace('\n', " ")))?,
        None => DiffusionJob::default(),
    };
    let set = |dst: &mut Option<f64>, v: Option<f64>| {
        if v.is_some() {
            *dst = v;
        }
    };
    set(&mut job.batch, num("batch", &args.batch)?);
    set(&mut job.width, num("width", &d.width)?);
    set(&mut job.height, num("height", &d.height)?);
    set(&mut job.resolution, num("resolution", &d.resolution)?);
    set(&mut job.lora_rank, num("lora_rank", &args.lora)?);
    match args.checkpointing.as_deref().map(str::trim) {
        None => {}
        Some("full") => job.gradient_checkpointing = Some(true),
        Some("none") => job.gradient_checkpointing = Some(false),
        Some(o) => {
            return Err(JobError(format!(
                "checkpointing: a pipeline's training step checkpoints every block (full) or \
                 none (got '{o}')"
            )))
        }
    }
    set(
        &mut job.max_sequence_length,
        num("max_sequence_length", &d.max_sequence_length)?,
    );
    if let Some(g) = num("reserve", &args.reserve)? {
        if !(g.is_finite() && g >= 0.0) {
            return Err(JobError(format!("reserve: GiB ≥ 0 (got {g})")));
        }
        job.reserve = Some((g * (1u64 << 30) as f64).round());
    }
    for (dst, src) in [
        (&mut job.precision, &args.precision),
        (&mut job.offload, &args.offload),
        (&mut job.attention, &args.attention),
        (&mut job.gpu, &args.gpu),
        (&mut job.task, &args.task),
        (&mut job.optimizer, &args.optimizer),
    ] {
        if src.is_some() {
            dst.clone_from(src);
        }
    }
    match d.cfg.as_deref().map(str::trim) {
        None => {}
        Some("on" | "true") => job.cfg = Some(true),
        Some("off" | "false") => job.cfg = Some(false),
        Some(o) => return Err(JobError(format!("cfg: on or off (got '{o}')"))),
    }
    job.vae_tiling = job.vae_tiling.or(d.vae_tiling.then_some(true));
    job.vae_slicing = job.vae_slicing.or(d.vae_slicing.then_some(true));
    job.drop_t5 = job.drop_t5.or(d.drop_t5.then_some(true));
    job.cache_latents = job.cache_latents.or(d.cache_latents.then_some(true));
    job.custom_prompts = job.custom_prompts.or(d.custom_prompts.then_some(true));
    Ok(job)
}

/// `estimate` of a pipeline.
pub fn run_estimate(
    p: &ResolvedPipeline,
    args: &JobArgs,
    d: &DiffusionArgs,
    json: bool,
    require_fit: bool,
) -> CmdResult {
    let report = estimate(p, &diffusion_job(args, d)?)?;
    if require_fit && report.fit.is_none() {
        return Err(Box::new(JobError(
            "--require-fit: needs a GPU to fit (give --gpu ID)".into(),
        )));
    }
    if json {
        print_json(&report)?;
    } else {
        print(&human(&report))?;
    }
    let fits = report.fit.as_ref().is_some_and(|f| f.fits);
    Ok(if require_fit && !fits { 1 } else { 0 })
}

/// `fit` of a pipeline.
pub fn run_fit(p: &ResolvedPipeline, args: &JobArgs, d: &DiffusionArgs, json: bool) -> CmdResult {
    let job = diffusion_job(args, d)?;
    let resolved = job.resolve(&p.pipeline).map_err(JobError)?;
    let answer = fit(p, &job)?;
    if json {
        print_json(&answer)?;
    } else {
        print(&fit_text(
            &answer,
            resolved.width,
            resolved.height,
            resolved.batch,
        ))?;
    }
    Ok(0)
}

fn fit_text(f: &DiffusionFit, w: u64, h: u64, b: u64) -> String {
    let or_none = |x: Option<u64>, unit: &str| match x {
        Some(n) => format!("{n}{unit}"),
        None => "none fits".to_string(),
    };
    let mut out = format!(
        "{} (capacity {})\n",
        paint(BOLD, &f.target.gpu),
        bytes(f.target.capacity)
    );
    out.push_str(&format!(
        "  largest batch at {w}×{h}: {}\n",
        or_none(f.max_batch, " images")
    ));
    let side = f.max_resolution.map(|s| format!("{s}×{s}"));
    out.push_str(&format!(
        "  largest square resolution at batch {b}: {} (sides step by {} px)\n",
        side.unwrap_or_else(|| "none fits".into()),
        f.side_step
    ));
    for n in &f.notes {
        out.push_str(&format!("  note: {n}\n"));
    }
    out
}

fn human(r: &DiffusionReport) -> String {
    let j = &r.job;
    let mut out = format!(
        "{}  {} parameters in {} models; {}×{}, batch {}, {}, offload {}\n",
        paint(BOLD, &r.model.pipeline),
        short_count(r.model.params_total),
        r.model.components.len(),
        j.width,
        j.height,
        j.batch,
        j.precision,
        match j.offload {
            Offload::None => "none",
            Offload::Model => "model",
            Offload::Sequential => "sequential",
        }
    );
    out.push_str(&format!(
        "\n{}\n",
        paint(HEADER, "Phases (bytes on the GPU)")
    ));
    out.push_str(&format!(
        "  {:<28} {:>12} {:>12} {:>12} {:>12}\n",
        "phase", "weights", "activations", "workspaces", "allocated"
    ));
    for ph in &r.phases {
        out.push_str(&format!(
            "  {:<28} {:>12} {:>12} {:>12} {:>12}\n",
            ph.phase,
            bytes(ph.parameters),
            bytes(ph.activations),
            bytes(ph.temporaries),
            bytes(ph.allocated)
        ));
    }
    let g = &r.per_gpu;
    let opt = |x: Option<u64>| x.map(bytes).unwrap_or_else(|| "-".into());
    out.push_str(&format!(
        "\n  peak in {}: allocated {}, reserved {}, with the CUDA context {}\n",
        g.peaks.peak_phase.as_deref().unwrap_or("-"),
        opt(g.peaks.peak_allocated),
        opt(g.peaks.peak_reserved),
        opt(g.peaks.device_total)
    ));
    if let Some(f) = &r.fit {
        let verdict = if f.fits { "fits" } else { "does not fit" };
        out.push_str(&format!(
            "  {} on {} (capacity {})\n",
            verdict,
            f.target.gpu,
            bytes(f.target.capacity)
        ));
    }
    for w in &r.warnings {
        out.push_str(&format!("  note: {w}\n"));
    }
    out
}
