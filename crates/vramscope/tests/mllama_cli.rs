//! Llama-3.2-Vision from the command line: `inspect` shows its components, `fit` answers how
//! many images fit a sequence, bad image input is a one-line error.

mod common;
use common::argv;

use assert_cmd::Command;

fn vramscope() -> Command {
    let mut c = Command::cargo_bin("vramscope").unwrap();
    c.env_remove("RUST_BACKTRACE").env_remove("NO_COLOR");
    c
}

fn fixture() -> String {
    common::formats_fixture("vlm/llama-3.2-11b-vision-instruct.json")
}

#[test]
fn inspect_shows_components_and_the_image_rule() {
    // The counts of transformers 5.24 on the meta device (crates/formats/tests/vlm_mllama.rs).
    common::inspect_shows(
        &fixture(),
        &[
            "Model components",
            "10,670,220,835",
            "863,567,379",
            "31,461,376",
            "32 + 8 gated global",
            "6404 vision tokens per image",
        ],
    );
}

/// "How many 1024×768 images fit each sequence": with the vision tower frozen and LoRA on the
/// language model's q/v projections, each image adds one text token, a frozen tower pass and
/// 6404 vision tokens to every cross-attention layer; the answer is a number, and more text
/// leaves room for no more images than less text does.
#[test]
fn fit_answers_how_many_images() {
    let most = |seq: &str| {
        let mut cmd = vramscope();
        cmd.args(["fit", &fixture(), "--gpu", "h100-80gb", "--seq", seq])
            .args(argv("--images 1x1024x768 --freeze vision --lora 16"))
            .args([
                "--lora-targets",
                "language:q_proj,language:v_proj",
                "--json",
            ]);
        let v = common::json_of_cmd(&mut cmd, &seq);
        v["max_images"].as_u64().unwrap_or_else(|| panic!("{v}"))
    };
    let (short, long) = (most("1024"), most("4096"));
    assert!(short >= 1 && long <= short, "{short} {long}");
}

#[test]
fn bad_images_are_one_line_errors() {
    let out = vramscope()
        .args(["estimate", &fixture(), "--images", "1x0x768"])
        .assert()
        .code(2);
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
