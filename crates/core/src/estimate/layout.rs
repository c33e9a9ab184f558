//! Checks that a parallel layout can run the model at all.

use crate::error::CoreError;
use crate::job::ResolvedJob;
use crate::model::ModelSpec;

/// Tensor parallelism splits attention heads (and KV heads, or replicates them when there are
/// fewer than ranks), pipeline parallelism needs a layer per stage, expert parallelism needs
/// experts to divide.
pub fn check(spec: &ModelSpec, job: &ResolvedJob) -> Result<(), CoreError> {
    let p = &job.parallel;
    let layers = spec.num_layers();
    if p.pp > layers {
        return Err(CoreError::field(
            "parallel.pp",
            format!(
                "{} pipeline stages for {layers} layers: each stage needs at least one",
                p.pp
            ),
        ));
    }
    if let Some(l) = spec.all_layers().next() {
        let heads = l.attention.kind.heads();
        if heads % p.tp != 0 {
            return Err(CoreError::field(
                "parallel.tp",
                format!(
                    "{} does not divide the model's {heads} attention heads",
                    p.tp
                ),
            ));
        }
        let kv = l.attention.kind.kv_heads();
        if kv % p.tp != 0 && !p.tp.is_multiple_of(kv) {
            return Err(CoreError::field(
                "parallel.tp",
                format!(
                    "{} neither divides nor is a multiple of the {kv} KV heads",
                    p.tp
                ),
            ));
        }
    }
    let experts = spec
        .all_layers()
        .find_map(|l| l.routed_experts().map(|m| m.experts));
    match experts {
        None if p.ep > 1 => {
            return Err(CoreError::field(
                "parallel.ep",
                format!("{} has no experts to split (a dense model)", spec.name),
            ))
        }
        Some(e) if e % p.ep != 0 => {
            return Err(CoreError::field(
                "parallel.ep",
                format!("{} does not divide the {e} experts", p.ep),
            ))
        }
        _ => {}
    }
    Ok(())
}
