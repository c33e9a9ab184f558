//! Builds a model's [`Inventory`] from its [`ModelSpec`]: the embeddings, each layer's norms,
//! the head, under the names the family's checkpoints use. The mixers (attention, state space)
//! are in `mixers.rs`, the MLPs (dense, mixture of experts) in `mlps.rs`.

use super::{Component, Inventory, Tensor};
use crate::dtype::DType;
use crate::error::CoreError;
use crate::model::*;

/// Builds the exact inventory of `spec`: every parameter of the model class it describes, tied
/// weights once, buffers (rotary tables, attention masks, DeepSeek's `e_score_correction_bias`)
/// excluded. Shapes follow PyTorch (`nn.Linear` weights are `[out, in]`; GPT-2's `Conv1D` is
/// `[in, out]`). Tensor names follow the family's Hugging Face checkpoints.
pub fn build_inventory(spec: &ModelSpec) -> Result<Inventory, CoreError> {
    let mut b = Builder {
        spec,
        dtype: spec.dtype,
        out: Vec::new(),
    };
    b.embeddings()?;
    let mut global = 0u32;
    if let Some(enc) = &spec.encoder {
        for (i, layer) in enc.layers.iter().enumerate() {
            b.layer(StackKind::Encoder, i, global, layer)?;
            global += 1;
        }
        if let Some(n) = enc.final_norm {
            let name = b.final_norm_name(StackKind::Encoder);
            b.norm(&name, n, None)?;
        }
    }
    let kind = if spec.encoder.is_some() {
        StackKind::Decoder
    } else {
        StackKind::Main
    };
    for (i, layer) in spec.decoder.layers.iter().enumerate() {
        b.layer(kind, i, global, layer)?;
        global += 1;
    }
    if let Some(n) = spec.decoder.final_norm {
        let name = b.final_norm_name(kind);
        b.norm(&name, n, None)?;
    }
    b.head()?;
    if let Some(v) = &spec.vision {
        crate::vision::vision_tensors(v, spec.dtype, &mut b.out)?;
    }
    b.idle_tensors()?;
    Ok(Inventory::new(b.out))
}

/// The component of an idle tensor ([`ModelSpec::idle_tensors`]), read from its shape
/// as the weight formats treat it: a matrix is an `nn.Linear` weight (attention's under
/// `.self_attn.`, else the MLP's), which bitsandbytes and the other linear formats quantize;
/// a convolution kernel (three or four dimensions) is kept in the model's dtype, as the
/// formats leave `nn.Conv*` alone (filed with the embeddings, as the towers' patch
/// convolutions are); a vector is a norm's weight, a scale or a bias.
pub(super) fn idle_component(name: &str, shape: &[u64]) -> Component {
    match shape.len() {
        2 if name.contains(".self_attn.") => Component::Attention,
        2 => Component::Mlp,
        0 | 1 => Component::Norm,
        _ => Component::Embedding,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum StackKind {
    Main,
    Encoder,
    Decoder,
}

pub(super) struct Builder<'a> {
    pub(super) spec: &'a ModelSpec,
    pub(super) dtype: DType,
    pub(super) out: Vec<Tensor>,
}

impl Builder<'_> {
    pub(super) fn push(
        &mut self,
        name: String,
        shape: Vec<u64>,
        layer: Option<u32>,
        component: Component,
    ) -> Result<(), CoreError> {
        self.out
            .push(Tensor::new(name, shape, self.dtype, layer, component)?);
        Ok(())
    }

    /// A linear layer `in → out`: weight `[out, in]` (or `[in, out]` for Conv1D) and bias.
    pub(super) fn linear(
        &mut self,
        name: &str,
        inp: u64,
        out: u64,
        bias: bool,
        layer: Option<u32>,
        c: Component,
    ) -> Result<(), CoreError> {
        let shape = if self.spec.naming == Naming::Gpt2 {
            vec![inp, out]
        } else {
            vec![out, inp]
        };
        self.push(format!("{name}.weight"), shape, layer, c)?;
        if bias {
            self.push(format!("{name}.bias"), vec![out], layer, c)?;
        }
        Ok(())
    }

    pub(super) fn norm(
        &mut self,
        name: &str,
        n: Norm,
        layer: Option<u32>,
    ) -> Result<(), CoreError> {
        self.push(
            format!("{name}.weight"),
            vec![n.dim],
            layer,
            Component::Norm,
        )?;
        if let NormKind::LayerNorm { bias: true } = n.kind {
            self.push(format!("{name}.bias"), vec![n.dim], layer, Component::Norm)?;
        }
        Ok(())
    }

    /// The prefix of the base model inside the task class (`model.`, `transformer.`, ...), or
    /// nothing for a bare base model.
    pub(super) fn root(&self) -> &'static str {
        let bare = matches!(self.spec.head, Head::None { .. });
        let root = match self.spec.naming {
            Naming::Llama
            | Naming::Mixtral
            | Naming::QwenMoe
            | Naming::Qwen35
            | Naming::DeepSeek
            | Naming::Phi3
            | Naming::GptOss
            | Naming::Llama4
            | Naming::Jamba
            | Naming::Granite
            | Naming::Lfm2
            | Naming::Zamba2
            | Naming::Gemma4
            | Naming::Gemma3n => "model.",
            Naming::Gpt2 | Naming::BigCode | Naming::Falcon => "transformer.",
            Naming::NeoX => "gpt_neox.",
            Naming::Opt => return if bare { "decoder." } else { "model.decoder." },
            Naming::Bert => "bert.",
            Naming::Roberta => "roberta.",
            Naming::T5 => "",
            Naming::Mamba | Naming::NemotronH => "backbone.",
        };
        if bare {
            ""
        } else {
            root
        }
    }

    fn embeddings(&mut self) -> Result<(), CoreError> {
        let s = self.spec;
        let r = self.root();
        let e = &s.embedding;
        let c = Component::Embedding;
        let (tok, pos) = match s.naming {
            Naming::Gpt2 | Naming::BigCode => ("wte", "wpe"),
            Naming::NeoX => ("embed_in", ""),
            Naming::Falcon => ("word_embeddings", ""),
            Naming::Opt => ("embed_tokens", "embed_positions"),
            Naming::Bert | Naming::Roberta => (
                "embeddings.word_embeddings",
                "embeddings.position_embeddings",
            ),
            Naming::T5 => ("shared", ""),
            Naming::Mamba | Naming::NemotronH => ("embeddings", ""),
            _ => ("embed_tokens", ""),
        };
        // Llama-3.2-Vision's text model has 8 rows beyond the vocabulary (`vision::mllama`).
        let extra = s.vision.as_ref().map_or(0, |v| v.extra_embedding_rows());
        self.push(
            format!("{r}{tok}.weight"),
            vec![s.vocab_size.saturating_add(extra), e.dim],
            None,
            c,
        )?;
        if let Some(p) = e.per_layer_inputs {
            self.gemma4_per_layer_tables(p)?;
        }
        if let Some(g) = &s.gemma3n {
            self.gemma3n_altup_projections(g)?;
        }
        if let Positions::Learned { rows } = e.positions {
            self.push(
                format!("{r}{pos}.weight"),
                vec![rows, s.hidden_size],
                None,
                c,
            )?;
        }
        if e.token_types > 0 {
            self.push(
                format!("{r}embeddings.token_type_embeddings.weight"),
                vec![e.token_types, s.hidden_size],
                None,
                c,
            )?;
        }
        if let Some(n) = e.norm {
            let before = self.out.len();
            self.norm(&format!("{r}embeddings.LayerNorm"), n, None)?;
            for t in &mut self.out[before..] {
                t.component = Component::Embedding;
            }
        }
        if e.projection {
            // OPT: project_out (hidden → dim) and project_in (dim → hidden), no bias.
            self.linear(
                &format!("{r}project_out"),
                s.hidden_size,
                e.dim,
                false,
                None,
                c,
            )?;
            self.linear(
                &format!("{r}project_in"),
                e.dim,
                s.hidden_size,
                false,
                None,
                c,
            )?;
        }
        Ok(())
    }

    fn layer_prefix(&self, kind: StackKind, i: usize) -> String {
        let r = self.root();
        match (self.spec.naming, kind) {
            (Naming::T5, StackKind::Encoder) => format!("encoder.block.{i}"),
            (Naming::T5, _) => format!("decoder.block.{i}"),
            (Naming::Gpt2 | Naming::BigCode | Naming::Falcon, _) => format!("{r}h.{i}"),
            (Naming::Bert | Naming::Roberta, _) => format!("{r}encoder.layer.{i}"),
            _ => format!("{r}layers.{i}"),
        }
    }

    fn final_norm_name(&self, kind: StackKind) -> String {
        let r = self.root();
        match (self.spec.naming, kind) {
            (Naming::T5, StackKind::Encoder) => "encoder.final_layer_norm".into(),
            (Naming::T5, _) => "decoder.final_layer_norm".into(),
            (Naming::Gpt2 | Naming::BigCode | Naming::Falcon, _) => format!("{r}ln_f"),
            (Naming::NeoX | Naming::Opt, _) => format!("{r}final_layer_norm"),
            (Naming::Mamba | Naming::NemotronH, _) => format!("{r}norm_f"),
            (Naming::Jamba | Naming::Zamba2, _) => format!("{r}final_layernorm"),
            (Naming::Lfm2, _) => format!("{r}embedding_norm"),
            _ => format!("{r}norm"),
        }
    }

    fn layer(
        &mut self,
        kind: StackKind,
        i: usize,
        global: u32,
        layer: &Layer,
    ) -> Result<(), CoreError> {
        let mut p = self.layer_prefix(kind, i);
        let l = Some(global);
        if let Some(sb) = &layer.shared_block {
            // Zamba2's hybrid layer: the shared block, then its own Mamba layer under
            // `mamba_decoder` (`Zamba2HybridLayer.__init__`).
            self.zamba2_shared(&p, sb, i as u64, l)?;
            p = format!("{p}.mamba_decoder");
        }
        if self.spec.naming == Naming::Gemma4 {
            return self.gemma4_layer(&p, layer, l);
        }
        if let Some(g) = &self.spec.gemma3n {
            return self.gemma3n_layer(&p, layer, g, l);
        }
        let is_t5_decoder = self.spec.naming == Naming::T5 && kind == StackKind::Decoder;
        let has_post_attn = layer
            .norms
            .iter()
            .any(|(s, _)| *s == NormSlot::PostAttention);
        for (slot, n) in &layer.norms {
            let name = self.norm_name(&p, *slot, has_post_attn, layer, is_t5_decoder);
            self.norm(&name, *n, l)?;
        }
        let attn_name = match self.spec.naming {
            Naming::T5 => format!("{p}.layer.0.SelfAttention"),
            Naming::Gpt2 | Naming::BigCode => format!("{p}.attn"),
            Naming::NeoX => format!("{p}.attention"),
            Naming::Falcon => format!("{p}.self_attention"),
            Naming::Bert | Naming::Roberta => format!("{p}.attention"),
            Naming::Mamba | Naming::NemotronH => format!("{p}.mixer"),
            Naming::Jamba | Naming::Granite if layer.attention.kind.state_space().is_some() => {
                format!("{p}.mamba")
            }
            Naming::Lfm2 if layer.attention.kind.state_space().is_some() => format!("{p}.conv"),
            Naming::Zamba2 => format!("{p}.mamba"),
            _ if layer.attention.vision_cross => format!("{p}.cross_attn"),
            _ if layer
                .attention
                .kind
                .state_space()
                .is_some_and(|s| s.version == SsmVersion::GatedDeltaNet) =>
            {
                format!("{p}.linear_attn")
            }
            _ => format!("{p}.self_attn"),
        };
        self.attention(&attn_name, &layer.attention, l)?;
        if layer.attention.vision_cross {
            // `MllamaCrossAttentionDecoderLayer`'s tanh gates, one scalar each.
            for gate in ["cross_attn_attn_gate", "cross_attn_mlp_gate"] {
                self.push(format!("{p}.{gate}"), vec![1], l, Component::Attention)?;
            }
        }
        if let Some(ps) = &layer.parallel_ssm {
            self.parallel_ssm(&format!("{p}.mamba"), ps, l)?;
        }
        if let Some(cross) = &layer.cross_attention {
            self.attention(&format!("{p}.layer.1.EncDecAttention"), cross, l)?;
        }
        let mlp_name = match self.spec.naming {
            Naming::T5 if is_t5_decoder => format!("{p}.layer.2.DenseReluDense"),
            Naming::T5 => format!("{p}.layer.1.DenseReluDense"),
            Naming::Mixtral => format!("{p}.block_sparse_moe"),
            Naming::Llama4 => format!("{p}.feed_forward"),
            Naming::Jamba | Naming::Lfm2 => format!("{p}.feed_forward"),
            Naming::NemotronH => format!("{p}.mixer"),
            // GraniteMoeHybridDecoderLayer without experts: the shared MLP alone.
            Naming::Granite if matches!(layer.mlp, Mlp::Dense(_)) => format!("{p}.shared_mlp"),
            Naming::Granite => format!("{p}.block_sparse_moe"),
            Naming::Opt | Naming::Bert | Naming::Roberta => p.clone(),
            _ => format!("{p}.mlp"),
        };
        match &layer.mlp {
            Mlp::Dense(d) => self.dense_mlp(&mlp_name, d, l, Component::Mlp)?,
            Mlp::Moe(m) => self.moe(&mlp_name, m, l)?,
            Mlp::None => {}
        }
        Ok(())
    }

    fn norm_name(
        &self,
        p: &str,
        slot: NormSlot,
        has_post_attn: bool,
        layer: &Layer,
        t5_decoder: bool,
    ) -> String {
        use NormSlot::*;
        let s = match self.spec.naming {
            Naming::Gpt2 | Naming::BigCode => match slot {
                PreAttention => "ln_1",
                _ => "ln_2",
            },
            Naming::Opt => match slot {
                PreAttention => "self_attn_layer_norm",
                _ => "final_layer_norm",
            },
            Naming::Falcon => {
                let two = layer.norms.len() == 2;
                match slot {
                    PreAttention if two && layer.parallel_residual => "ln_attn",
                    PreAttention => "input_layernorm",
                    _ if layer.parallel_residual => "ln_mlp",
                    _ => "post_attention_layernorm",
                }
            }
            Naming::Bert | Naming::Roberta => match slot {
                PostAttention => "attention.output.LayerNorm",
                _ => "output.LayerNorm",
            },
            Naming::Mamba | Naming::NemotronH => "norm",
            Naming::Jamba => match slot {
                PreAttention => "input_layernorm",
                _ => "pre_ff_layernorm",
            },
            Naming::Lfm2 => match slot {
                PreAttention => "operator_norm",
                _ => "ffn_norm",
            },
            Naming::T5 => match slot {
                PreAttention => "layer.0.layer_norm",
                PreCrossAttention => "layer.1.layer_norm",
                _ if t5_decoder => "layer.2.layer_norm",
                _ => "layer.1.layer_norm",
            },
            _ => match slot {
                PreAttention => "input_layernorm",
                PostAttention => "post_attention_layernorm",
                PreMlp if has_post_attn => "pre_feedforward_layernorm",
                PreMlp => "post_attention_layernorm",
                PostMlp => "post_feedforward_layernorm",
                PreCrossAttention => "cross_attn_layernorm",
            },
        };
        format!("{p}.{s}")
    }

    fn head(&mut self) -> Result<(), CoreError> {
        let s = self.spec;
        let h = s.hidden_size;
        let v = s.vocab_size;
        let c = Component::Head;
        match s.head {
            Head::LanguageModel { tied, bias } => {
                if !tied {
                    let name = match s.naming {
                        Naming::NeoX => "embed_out",
                        _ => "lm_head",
                    };
                    // The head reads the hidden state, or the projected state in OPT-350m.
                    self.linear(name, s.embedding.dim, v, bias, None, c)?;
                } else if bias {
                    self.push("lm_head.bias".into(), vec![v], None, c)?;
                }
            }
            Head::MaskedLm { tied } => {
                let (p, dense, ln, dec, b) = match s.naming {
                    Naming::Roberta => (
                        "lm_head",
                        "lm_head.dense",
                        "lm_head.layer_norm",
                        "lm_head.decoder",
                        "lm_head.bias",
                    ),
                    _ => (
                        "cls.predictions",
                        "cls.predictions.transform.dense",
                        "cls.predictions.transform.LayerNorm",
                        "cls.predictions.decoder",
                        "cls.predictions.bias",
                    ),
                };
                let _ = p;
                self.linear(dense, h, h, true, None, c)?;
                let before = self.out.len();
                self.norm(ln, Norm::layer(h, true), None)?;
                for t in &mut self.out[before..] {
                    t.component = Component::Head;
                }
                if !tied {
                    self.push(format!("{dec}.weight"), vec![v, h], None, c)?;
                }
                self.push(b.into(), vec![v], None, c)?;
            }
            Head::None { pooler } => {
                if pooler {
                    let r = self.root();
                    self.linear(&format!("{r}pooler.dense"), h, h, true, None, c)?;
                }
            }
            Head::Classifier { labels, pooler } => {
                let r = self.root();
                match s.naming {
                    Naming::Bert => {
                        if pooler {
                            self.linear(&format!("{r}pooler.dense"), h, h, true, None, c)?;
                        }
                        self.linear("classifier", h, labels, true, None, c)?;
                    }
                    Naming::Roberta => {
                        self.linear("classifier.dense", h, h, true, None, c)?;
                        self.linear("classifier.out_proj", h, labels, true, None, c)?;
                    }
                    _ => self.linear("score", h, labels, false, None, c)?,
                }
            }
        }
        Ok(())
    }
}

pub(super) fn mul(a: u64, b: u64, what: &str) -> Result<u64, CoreError> {
    a.checked_mul(b).ok_or_else(|| overflow(what))
}

pub(super) fn overflow(what: &str) -> CoreError {
    CoreError::Overflow { what: what.into() }
}
