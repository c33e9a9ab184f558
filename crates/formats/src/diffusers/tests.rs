use super::*;
use proptest::prelude::*;

fn read(index: &str, cfg: &str) -> Result<Pipeline> {
    pipeline_from_texts(index, "model_index.json", |name| {
        Ok((cfg.to_string(), format!("{name}/config.json")))
    })
}

#[test]
fn tokenizers_schedulers_and_absent_parts_are_skipped() {
    let index = r#"{"_class_name": "X", "scheduler": ["diffusers", "EulerDiscreteScheduler"],
        "tokenizer": ["transformers", "CLIPTokenizer"], "safety_checker": [null, null],
        "feature_extractor": ["transformers", "CLIPImageProcessor"],
        "vae": ["diffusers", "AutoencoderKL"]}"#;
    let p = read(
        index,
        r#"{"block_out_channels": [8], "norm_num_groups": 2}"#,
    )
    .unwrap();
    assert_eq!(p.class, "X");
    assert_eq!(p.components.len(), 1);
    assert_eq!(p.components[0].name, "vae");
}

#[test]
fn unknown_classes_and_bad_fields_are_refused_naming_them() {
    let index = r#"{"_class_name": "X", "controlnet": ["diffusers", "ControlNetModel"]}"#;
    let e = read(index, "{}").unwrap_err().to_string();
    assert!(
        e.contains("'ControlNetModel'") && e.contains("controlnet/config.json"),
        "{e}"
    );
    let index = r#"{"_class_name": "X", "vae": ["diffusers", "AutoencoderKL"]}"#;
    let e = read(index, r#"{"latent_channels": -4}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("latent_channels"), "{e}");
    let e = read("[1]", "{}").unwrap_err().to_string();
    assert!(e.contains("not a JSON object"), "{e}");
    let index = r#"{"_class_name": "X", "../vae": ["diffusers", "AutoencoderKL"]}"#;
    assert!(read(index, "{}").is_err());
}

proptest! {
    /// Any model_index / config text is read or refused with a message; never a panic.
    #[test]
    fn never_panics(cfg in "\\{(\"[a-z_]{1,12}\": (-?[0-9]{1,8}|true|null|\\[[0-9, ]{0,12}\\]|\"[A-Za-z0-9]{0,24}\"),? ?){0,6}\\}",
                    class in "(FluxTransformer2DModel|SD3Transformer2DModel|UNet2DConditionModel|AutoencoderKL|CLIPTextModel|T5EncoderModel|Foo)") {
        let index = format!(r#"{{"_class_name": "P", "m": ["diffusers", "{class}"]}}"#);
        if let Ok(p) = read(&index, &cfg) {
            let _ = p.params_total();
        }
    }
}
