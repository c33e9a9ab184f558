//! The model states take a model's layers per composition (a class's tensors in one layer
//! times the rank's layers of that composition). Here they are checked against a walk of the
//! inventory tensor by tensor, on a model whose layers are of two compositions (DeepSeek-V2-Lite:
//! the first layer's MLP dense, the other 26 mixtures of experts) split over pipeline stages.

use serde_json::json;
use vramscope_core::estimate::round_size;
use vramscope_core::estimate::states::model_states;
use vramscope_core::job::Job;
use vramscope_formats::model_source::load_job_model;

#[test]
fn each_layers_gradients_are_its_own_tensors() {
    let m = load_job_model(&json!("deepseek-v2-lite"))
        .unwrap()
        .into_input();
    let inv = m.inventory.as_ref().unwrap();
    let layers = m.spec.as_ref().unwrap().num_layers() as usize;
    assert_eq!(layers, 27); // config.json num_hidden_layers
    for pp in [1u64, 2, 4] {
        let job: Job = serde_json::from_value(json!({
            "batch": 1, "seq": 512, "parallel": {"gpus": pp, "pp": pp}
        }))
        .unwrap();
        let job = job.resolve(None).unwrap();
        let st = model_states(&m, &job, &mut Vec::new()).unwrap();
        // The first stage holds ⌈27 / pp⌉ blocks; bf16-mixed AdamW on fp32 weights keeps an
        // fp32 gradient per weight (4 bytes an element), each its own allocation.
        let on_rank = layers.div_ceil(pp as usize);
        let mut expected = vec![0u64; layers];
        for t in &inv.tensors {
            if let Some(l) = t.layer.map(|l| l as usize).filter(|&l| l < on_rank) {
                expected[l] += round_size(t.elements() * 4);
            }
        }
        assert_eq!(st.layer_grads, expected, "pp {pp}");
        // Two compositions: the dense first layer holds less than an expert layer.
        assert!(expected[0] > 0 && expected[0] < expected[1], "pp {pp}");
    }
}
