//! llama.cpp's fit: the most layers `-ngl` puts on the GPU.

use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::fit::probe::fits_in;
use crate::job::ResolvedJob;

/// llama.cpp: the most layers `-ngl` puts on the GPU within `capacity` (the block count + 1
/// is the output layer too). Memory grows with every layer moved to the GPU: the largest that
/// fits, counted down.
pub(crate) fn most_gpu_layers(
    model: &ModelInput,
    spec: &crate::model::ModelSpec,
    job: &ResolvedJob,
    capacity: u64,
    evals: &mut u64,
) -> Result<Option<u64>, CoreError> {
    let all = spec.num_layers() + 1;
    for ngl in (0..=all).rev() {
        let mut j = job.clone();
        j.set_engine("n_gpu_layers", ngl.into())?;
        if fits_in(model, &j, capacity, evals)? {
            return Ok(Some(ngl));
        }
    }
    Ok(None)
}
