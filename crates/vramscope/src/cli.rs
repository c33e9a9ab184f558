//! Command-line definitions.

use clap::{Parser, Subcommand, ValueEnum};

const ABOUT: &str = "Where did my GPU memory go? Estimate, explain and measure the VRAM of \
training and inference jobs.";

const EXAMPLES: &str = "\
Examples:
  vramscope inspect llama-3.1-8b              parameters per component, dtype and layer
  vramscope inspect ./my-model/ --json        from config.json and/or safetensors headers
  vramscope inspect model.Q4_K_M.gguf         exact bytes of every quantized tensor
  vramscope models                            the built-in presets
  vramscope gpus                              the GPU catalog with reported capacities
  vramscope completions bash > /etc/bash_completion.d/vramscope

MODEL is a preset id (see `vramscope models`), a Hugging Face repo name of a preset
(meta-llama/Llama-3.1-8B), a config.json, a model directory, a .safetensors file or a .gguf
file. Only headers are read, never weights.";

#[derive(Debug, Parser)]
#[command(name = "vramscope", version, about = ABOUT, after_help = EXAMPLES)]
pub struct Cli {
    /// When to use colours (NO_COLOR and non-terminal output turn them off under `auto`).
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true)]
    pub color: ColorChoice,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show a model's parameters: totals, per component, per dtype, per layer, every tensor.
    #[command(after_help = "\
Examples:
  vramscope inspect gpt2
  vramscope inspect mixtral-8x7b --layers
  vramscope inspect ../shared/fixtures/hf_tiny_llama --tensors
  vramscope inspect qwen2.5-7b --json | jq .model")]
    Inspect {
        /// Preset id, HF repo name of a preset, config.json, model directory, .safetensors or
        /// .gguf.
        model: String,
        /// Print the report as JSON (the contract's `{"model": ..., "tensors": [...]}`).
        #[arg(long)]
        json: bool,
        /// List every layer instead of a summary of the first and last.
        #[arg(long)]
        layers: bool,
        /// List every tensor with its shape, dtype and bytes.
        #[arg(long)]
        tensors: bool,
    },
    /// List the built-in model presets.
    Models {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the GPU catalog: capacity as the device reports it, with the source.
    Gpus {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script.
    Completions {
        /// The shell to generate for.
        shell: clap_complete::Shell,
    },
}
