//! The estimator's input: a model as every estimate of it reads it, with its memo.

use super::memo;
use crate::inventory::Inventory;
use crate::model::ModelSpec;

/// What the estimator knows about the model.
///
/// A model is not changed once built ([`ModelInput::new`]): the parts of an estimate that
/// depend only on it and a few job fields are remembered in its [`memo::Memo`] and reused by
/// every later estimate of it (a clone starts with an empty memo).
#[derive(Debug, Clone)]
pub struct ModelInput {
    pub name: String,
    /// The architecture; `None` for a bare parameter count or a file without config.
    pub spec: Option<ModelSpec>,
    /// The parameter tensors; `None` for a bare parameter count.
    pub inventory: Option<Inventory>,
    pub params_total: u64,
    memo: memo::Memo,
}

impl ModelInput {
    /// The estimator's input for a model: its name, architecture, tensors and parameter count.
    pub fn new(
        name: String,
        spec: Option<ModelSpec>,
        inventory: Option<Inventory>,
        params_total: u64,
    ) -> Self {
        ModelInput {
            name,
            spec,
            inventory,
            params_total,
            memo: memo::Memo::default(),
        }
    }

    /// What this model remembers between estimates.
    pub(crate) fn memo(&self) -> &memo::Memo {
        &self.memo
    }
}
