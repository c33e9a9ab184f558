//! The tests' mock Hugging Face Hub (`tests/hub/mod.rs`: Llama-3.1-8B in four shards, GPT-2,
//! a gated repo, a GGUF repo, a LoRA adapter) served on loopback, for timing
//! `vramscope estimate ORG/NAME` against it (BENCHMARKS.md). Prints its URL; serves until
//! killed.

#[path = "../tests/hub/mod.rs"]
#[allow(dead_code)]
mod hub;

fn main() {
    let mock = hub::start(hub::hub(hub::repos(), None));
    println!("{}", mock.url());
    loop {
        std::thread::park();
    }
}
