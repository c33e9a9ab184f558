//! `vramscope models` and `vramscope gpus`: the compiled-in catalogs.

use super::CmdResult;
use crate::output::{paint, print, print_json, BOLD, DIM};
use crate::units::{bytes, short_count};
use comfy_table::CellAlignment;

pub fn models(json: bool) -> CmdResult {
    let rows = crate::app::models()?;
    if json {
        print_json(&rows)?;
        return Ok(0);
    }
    let mut t = crate::output::table(["id", "repo", "type", "params", "layers", "hidden", "dtype"]);
    for r in &rows {
        t.add_row([
            r.id.clone(),
            r.repo.clone(),
            r.model_type.clone(),
            short_count(r.params_total),
            r.layers.to_string(),
            r.hidden.to_string(),
            r.dtype.clone(),
        ]);
    }
    for col in [3, 4, 5] {
        if let Some(c) = t.column_mut(col) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    print(&format!(
        "{}\n{t}\n{}\n",
        paint(
            BOLD,
            &format!("{} built-in presets (real config.json files)", rows.len())
        ),
        paint(
            DIM,
            "Use an id or the repo name as MODEL; `vramscope inspect ID` for details."
        )
    ))?;
    Ok(0)
}

pub fn gpus(json: bool) -> CmdResult {
    let cat = crate::app::gpus();
    if json {
        print_json(&cat)?;
        return Ok(0);
    }
    let mut t = crate::output::table(["id", "name", "arch", "reported", "bf16"]);
    for g in &cat {
        t.add_row([
            g.id.clone(),
            g.name.clone(),
            g.arch.clone(),
            bytes(g.memory_bytes),
            if g.bf16 { "yes" } else { "no" }.to_string(),
        ]);
    }
    for col in [3] {
        if let Some(c) = t.column_mut(col) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    print(&format!(
        "{}\n{t}\n{}\n",
        paint(BOLD, &format!("{} GPUs", cat.len())),
        paint(
            DIM,
            "Capacity is what the device reports (nvidia-smi total), not the marketing figure; \
             unified-memory machines (Apple, GB10): the GPU's share, the OS keeps the rest; \
             sources: `vramscope gpus --json`."
        )
    ))?;
    Ok(0)
}
