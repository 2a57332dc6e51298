//! The README's library tour, run as written: the README's `rust` block is these lines
//! (a tidy test below holds the two together), on a root of its own.

use omnigraph_graph::Omnigraph;
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::CommitRef;

async fn tour(
    root: &str,
) -> omnigraph_core::Result<Option<serde_json::Map<String, serde_json::Value>>> {
    let graph = Omnigraph::create(root, "node Person { id: String @key, age: Int32? }").await?;
    let row = serde_json::json!({"id": "ada", "age": 36});
    let rows = vec![row.as_object().unwrap().clone()];
    graph.insert_json("Person", rows).await?;
    let ada = graph.get("Person", &"ada".into(), &CommitRef::Head).await?;
    graph.maintenance().optimize().await?; // compaction and index folds, one commit per table
    Ok(ada)
}

#[tokio::test]
async fn the_readme_tour_runs_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("people.omni");
    let ada = tour(root.to_str().unwrap()).await.unwrap().unwrap();
    assert_eq!(ada["age"], 36);
    // The optimize it ends with published on top of the insert: the row reads back at
    // the new head, from a handle that never saw the first.
    let reopened = Omnigraph::open(root.to_str().unwrap()).await.unwrap();
    let head = reopened.head().await.unwrap();
    assert!(head.seq >= 1, "{head:?}");
    let again = reopened
        .get("Person", &"ada".into(), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again["id"], "ada");
}

/// Every line of the README's `rust` block, but the one that names its root, is a line
/// of [`tour`]: the tour a newcomer copies is the one this suite runs.
#[test]
fn the_readme_tour_is_the_one_this_suite_runs() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let this = include_str!("tour.rs");
    let block = readme
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README has a rust block");
    let lines: Vec<&str> = block
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("let root"))
        .collect();
    assert!(lines.len() >= 6, "{lines:?}");
    for line in lines {
        assert!(
            this.lines().any(|ours| ours.trim() == line),
            "the README's tour has a line this suite does not run: {line}"
        );
    }
}
