//! Gemma 3n's tensors (`Naming::Gemma3n`), as transformers 5.24 names them in
//! `Gemma3nForCausalLM` (`models/gemma3n/modeling_gemma3n.py`: `Gemma3nTextModel.__init__`,
//! `Gemma3nTextDecoderLayer.__init__`, `Gemma3nTextAltUp.__init__`,
//! `Gemma3nTextLaurelBlock.__init__`). The layer's attention, MLP, norms and per-layer-input
//! branch are Gemma 4's (`inventory/gemma4.rs`).

use super::builder::Builder;
use super::Component;
use crate::error::CoreError;
use crate::model::{Gemma3nParts, Layer, MultimodalEmbedder, Norm};

impl Builder<'_> {
    /// `Gemma3nTextModel.__init__`: `altup_num_inputs - 1` square `altup_projections` and as
    /// many `altup_unembed_projections`, beside the embeddings.
    pub(super) fn gemma3n_altup_projections(&mut self, g: &Gemma3nParts) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        for list in ["altup_projections", "altup_unembed_projections"] {
            for j in 0..g.altup_inputs.saturating_sub(1) {
                let name = format!("model.{list}.{j}");
                self.linear(&name, h, h, false, None, Component::Embedding)?;
            }
        }
        for (name, e) in ["embed_vision", "embed_audio"]
            .into_iter()
            .zip(g.embedders.iter().flatten())
        {
            self.multimodal_embedder(&format!("model.{name}"), e)?;
        }
        Ok(())
    }

    /// `Gemma3nMultimodalEmbedder.__init__`: `embedding [vocab, width]`, `hard_embedding_norm`
    /// and `soft_embedding_norm [width]`, `embedding_projection [hidden, width]`; the
    /// post-projection norm has no weight (`with_scale=False`).
    fn multimodal_embedder(&mut self, p: &str, e: &MultimodalEmbedder) -> Result<(), CoreError> {
        let (h, c) = (self.spec.hidden_size, Component::Embedding);
        self.push(
            format!("{p}.embedding.weight"),
            vec![e.vocab, e.width],
            None,
            c,
        )?;
        for n in ["hard_embedding_norm", "soft_embedding_norm"] {
            self.norm(&format!("{p}.{n}"), Norm::rms(e.width), None)?;
        }
        self.linear(
            &format!("{p}.embedding_projection"),
            e.width,
            h,
            false,
            None,
            c,
        )
    }

    /// The spec's [`idle_tensors`](crate::model::ModelSpec::idle_tensors) (Gemma 3n's towers,
    /// Gemma 4's audio tower and embedder), outside the layer stacks, marked
    /// [`idle`](super::Tensor::idle), each in the part of the tower it belongs to
    /// ([`Part::of_idle_name`](crate::vision::Part::of_idle_name)).
    pub(super) fn idle_tensors(&mut self) -> Result<(), CoreError> {
        for (name, shape) in &self.spec.idle_tensors {
            let c = super::builder::idle_component(name, shape);
            let mut t = super::Tensor::new(name.clone(), shape.clone(), self.dtype, None, c)?;
            t.idle = true;
            t.part = crate::vision::Part::of_idle_name(name);
            self.out.push(t);
        }
        Ok(())
    }

    /// One `Gemma3nTextDecoderLayer`: Gemma 4's layer (attention, MLP, four norms, per-layer
    /// input branch), then `altup` (`correct_output_scale [hidden]`, `correction_coefs [n, n]`,
    /// `prediction_coefs [n², n]`, `modality_router [n, hidden]`, `router_norm [hidden]`) and
    /// `laurel` (`linear_left [rank, hidden]`, `linear_right [hidden, rank]`,
    /// `post_laurel_norm [hidden]`).
    pub(super) fn gemma3n_layer(
        &mut self,
        p: &str,
        layer: &Layer,
        g: &Gemma3nParts,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        self.gemma4_layer(p, layer, l)?;
        let (h, n, c) = (self.spec.hidden_size, g.altup_inputs, Component::Mlp);
        let a = format!("{p}.altup");
        self.push(format!("{a}.correct_output_scale"), vec![h], l, c)?;
        self.linear(&format!("{a}.correction_coefs"), n, n, false, l, c)?;
        let nn = super::builder::mul(n, n, "altup_num_inputs")?;
        self.linear(&format!("{a}.prediction_coefs"), n, nn, false, l, c)?;
        self.linear(&format!("{a}.modality_router"), h, n, false, l, c)?;
        self.norm(&format!("{a}.router_norm"), Norm::rms(h), l)?;
        let r = format!("{p}.laurel");
        self.linear(&format!("{r}.linear_left"), h, g.laurel_rank, false, l, c)?;
        self.linear(&format!("{r}.linear_right"), g.laurel_rank, h, false, l, c)?;
        self.norm(&format!("{r}.post_laurel_norm"), Norm::rms(h), l)
    }
}
