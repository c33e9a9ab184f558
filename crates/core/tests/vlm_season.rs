//! PaliGemma 2 and LFM2-VL training steps against tiny configs measured on the CPU tensor by
//! tensor (`validation/cpu-measured-vlm-season.json`, made with `../shared/measure/measure.py`
//! patched as `scripts/measure_vlm.patch` then `scripts/measure_vlm_season.patch`;
//! validation/README.md): image steps through the whole model, tower and projector included.

mod common;

mod measured;

/// Every measured case within its tolerance (3 %): the peaks net of the two cuBLAS
/// workspaces the estimate counts on a GPU and a CPU run does not have.
#[test]
fn measured_vlm_season_steps_within_tolerance() {
    let all = measured::compare("cpu-measured-vlm-season.json");
    assert!(all.len() >= 4);
    let failed: Vec<String> = all
        .iter()
        .filter(|c| c.error.abs() > c.tolerance)
        .map(|c| format!("{} {:+.2}%", c.id, c.error * 100.0))
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
}
