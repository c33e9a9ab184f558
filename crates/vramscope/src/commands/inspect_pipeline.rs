//! `vramscope inspect DIR` when DIR holds a diffusers pipeline (`model_index.json`): its
//! models, each with its class, role and exact parameter count, and the weights the GPU holds
//! with and without `enable_model_cpu_offload`.

use super::CmdResult;
use crate::output::{paint, print, print_json, BOLD, HEADER};
use crate::units::{bytes, short_count, thousands};
use comfy_table::{presets, CellAlignment, Table};
use serde::Serialize;
use std::path::Path;
use vramscope_core::diffusion::residency::{resident_weight_bytes, Offload};
use vramscope_core::diffusion::{Pipeline, Role};

/// Bytes a parameter in bf16/fp16, the dtype the pipelines' cards load them in.
const HALF: u64 = 2;

#[derive(Serialize)]
struct ComponentRow {
    name: String,
    library: String,
    class: String,
    role: Role,
    params: u64,
    bytes_16bit: u64,
}

#[derive(Serialize)]
struct PipelineReport {
    pipeline: String,
    source: String,
    components: Vec<ComponentRow>,
    params_total: u64,
    /// Weights on the GPU in 16-bit, all resident (`pipe.to("cuda")`).
    resident_bytes_16bit: u64,
    /// The same under `enable_model_cpu_offload()` (the largest model).
    resident_bytes_16bit_model_offload: u64,
    /// Whether classifier-free guidance doubles the denoiser's batch.
    cfg_doubles_batch: bool,
}

fn overflow() -> Box<dyn std::error::Error> {
    "pipeline parameter count past 2^64".into()
}

fn report(p: &Pipeline, source: &str) -> Result<PipelineReport, Box<dyn std::error::Error>> {
    let mut components = Vec::new();
    for c in &p.components {
        let params = c.arch.params().ok_or_else(overflow)?;
        components.push(ComponentRow {
            name: c.name.clone(),
            library: c.library.clone(),
            class: c.class.clone(),
            role: c.arch.role(),
            params,
            bytes_16bit: params.checked_mul(HALF).ok_or_else(overflow)?,
        });
    }
    Ok(PipelineReport {
        pipeline: p.class.clone(),
        source: source.to_string(),
        components,
        params_total: p.params_total().ok_or_else(overflow)?,
        resident_bytes_16bit: resident_weight_bytes(p, Offload::None, HALF).ok_or_else(overflow)?,
        resident_bytes_16bit_model_offload: resident_weight_bytes(p, Offload::Model, HALF)
            .ok_or_else(overflow)?,
        cfg_doubles_batch: p.cfg_doubles_batch(),
    })
}

/// Inspects the pipeline in `dir`.
pub fn run(dir: &Path, json: bool) -> CmdResult {
    let p = vramscope_formats::diffusers::read_pipeline_dir(dir)?;
    let r = report(&p, &dir.display().to_string())?;
    if json {
        print_json(&r)?;
    } else {
        print(&human(&r))?;
    }
    Ok(0)
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Denoiser => "denoiser",
        Role::TextEncoder => "text encoder",
        Role::Vae => "vae",
    }
}

fn human(r: &PipelineReport) -> String {
    let mut out = format!(
        "{}  diffusers pipeline, {} parameters in {} models  ({})\n",
        paint(BOLD, &r.pipeline),
        short_count(r.params_total),
        r.components.len(),
        r.source
    );
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.set_header(["component", "class", "role", "params", "bf16/fp16"]);
    for c in &r.components {
        t.add_row([
            c.name.clone(),
            c.class.clone(),
            role_name(c.role).to_string(),
            thousands(c.params),
            bytes(c.bytes_16bit),
        ]);
    }
    for col in [3, 4] {
        if let Some(c) = t.column_mut(col) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    out.push_str(&format!("\n{}\n{t}\n", paint(HEADER, "Components")));
    out.push_str(&format!(
        "\n  weights on the GPU (16-bit): {} all resident, {} with enable_model_cpu_offload\n",
        bytes(r.resident_bytes_16bit),
        bytes(r.resident_bytes_16bit_model_offload)
    ));
    let cfg = if r.cfg_doubles_batch {
        "classifier-free guidance runs the denoiser on twice the batch"
    } else {
        "guidance-distilled: the denoiser runs once per step (no CFG batch doubling)"
    };
    out.push_str(&format!("  {cfg}\n"));
    out
}
