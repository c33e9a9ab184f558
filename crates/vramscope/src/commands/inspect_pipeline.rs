//! `vramscope inspect MODEL` when MODEL names a diffusers pipeline (`model_index.json`): its
//! models, each with its class, role and exact parameter count, and the weights the GPU holds
//! with and without `enable_model_cpu_offload`.

use super::CmdResult;
use crate::app::diffusion::{inspect, PipelineInspect};
use crate::output::{paint, print, print_json, BOLD, HEADER};
use crate::units::{bytes, short_count, thousands};
use comfy_table::CellAlignment;
use vramscope_core::diffusion::Role;
use vramscope_hub::ResolvedPipeline;

/// Inspects the pipeline MODEL named.
pub fn run(p: &ResolvedPipeline, json: bool) -> CmdResult {
    let r = inspect(p)?;
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

fn human(r: &PipelineInspect) -> String {
    let mut out = format!(
        "{}  diffusers pipeline, {} parameters in {} models  ({})\n",
        paint(BOLD, &r.pipeline),
        short_count(r.params_total),
        r.components.len(),
        r.source
    );
    let mut t = crate::output::table(["component", "class", "role", "params", "bf16/fp16"]);
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
