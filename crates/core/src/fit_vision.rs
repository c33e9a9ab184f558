//! Fit for a vision-language model: how many images of the job's size fit each sequence at the
//! job's batch and text length — the estimator searched over `images.count`, each image adding
//! its tokens (the family's rule) to the sequence and its patches to the vision tower.

use crate::error::CoreError;
use crate::estimate::ModelInput;
use crate::fit::probe::fits_in;
use crate::job::ResolvedJob;
use crate::search::largest;

/// Upper bound of the images search (the job field's own limit).
const MAX_IMAGES: u64 = 1 << 16;

/// The images search's answer: the most images (`None`: not even one) and a note when the
/// model's positions were the limit.
pub type ImagesAnswer = (Option<u64>, Option<String>);

/// The most images per sequence that fit `capacity`, the model's positions permitting, and a
/// note when the positions were the limit; `None` when the job has no images or the model no
/// vision tower.
pub fn max_images(
    model: &ModelInput,
    job: &ResolvedJob,
    capacity: u64,
    evals: &mut u64,
) -> Result<Option<ImagesAnswer>, CoreError> {
    let (Some(images), Some(spec)) = (job.images, model.spec.as_ref()) else {
        return Ok(None);
    };
    let Some(v) = spec.vision.as_ref() else {
        return Ok(None);
    };
    let per_image = crate::estimate::vision::image_cost(v, job)?.tokens.max(1);
    let by_positions = spec
        .max_position_embeddings
        .map(|m| m.saturating_sub(job.seq) / per_image);
    let hi = by_positions.unwrap_or(MAX_IMAGES).clamp(1, MAX_IMAGES);
    let found = largest(hi, |n| {
        let mut j = job.clone();
        j.images = Some(crate::vision::Images { count: n, ..images });
        j.image_tokens = 0;
        fits_in(model, &j, capacity, evals)
    })?;
    let note = (found == Some(hi) && by_positions == Some(hi)).then(|| {
        format!(
            "the images search stopped at the model's {} positions ({} tokens per image beside \
             seq {})",
            spec.max_position_embeddings.unwrap_or(0),
            per_image,
            job.seq
        )
    });
    Ok(Some((found, note)))
}
