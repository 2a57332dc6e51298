//! Drives the built `omnigraph` binary as an operator would.

use std::process::Command;

fn omnigraph(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(args)
        .output()
        .expect("run omnigraph")
}

fn example() -> String {
    format!("{}/../examples/social.pg", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn help_lists_the_commands() {
    let output = omnigraph(&["--help"]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("schema"), "{text}");
}

#[test]
fn schema_check_prints_tables_and_json() {
    let output = omnigraph(&["schema", "check", &example()]);
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("edge WorksAt (key id)"), "{text}");
    assert!(
        text.contains("index embedding_vector on embedding (vector)"),
        "{text}"
    );

    let output = omnigraph(&["schema", "check", &example(), "--json"]);
    assert!(output.status.success());
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["hash"].as_str().unwrap().len(), 64);
    assert_eq!(document["types"].as_array().unwrap().len(), 5);
    assert_eq!(document["types"][3]["columns"][1]["name"], "src");
}

#[test]
fn a_bad_schema_exits_2_with_code_location_and_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.pg");
    std::fs::write(&path, "node A {\n  k: String @key,\n  n: Strng\n}\n").unwrap();
    let output = omnigraph(&["schema", "check", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let text = String::from_utf8(output.stderr).unwrap();
    assert!(text.contains("error[bad_input]"), "{text}");
    assert!(text.contains("line 3, column 6"), "{text}");
    assert!(text.contains("evidence: before_effect"), "{text}");

    let output = omnigraph(&["schema", "check", path.to_str().unwrap(), "--json"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let document: serde_json::Value = serde_json::from_slice(&output.stderr).unwrap();
    assert_eq!(document["error"]["code"], "bad_input");
    assert_eq!(document["error"]["evidence"]["kind"], "before_effect");
}

#[test]
fn bad_flags_are_usage_errors() {
    let output = omnigraph(&["schema", "check"]);
    assert_eq!(output.status.code(), Some(2));
    let output = omnigraph(&["frobnicate"]);
    assert_eq!(output.status.code(), Some(2));
}
