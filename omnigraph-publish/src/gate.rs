//! The branch gate: one publisher per (root, branch) in a process. Every handle on a
//! root shares it because the registry is keyed by the root's canonical URI. It is held
//! only to validate and publish, never while staging nor while a writer waits after
//! losing a race; between processes the commit
//! put-if-absent is the only fence.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

type GateMap = HashMap<(String, String), Arc<AsyncMutex<()>>>;

static GATES: LazyLock<Mutex<GateMap>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Holding this guard is holding the gate of one (root, branch).
pub(crate) struct GateGuard {
    _guard: OwnedMutexGuard<()>,
}

/// Waits for the gate of `branch` in the root with canonical URI `root_key`.
pub(crate) async fn acquire(root_key: &str, branch: &str) -> GateGuard {
    let gate = GATES
        .lock()
        .entry((root_key.to_string(), branch.to_string()))
        .or_insert_with(|| Arc::new(AsyncMutex::new(())))
        .clone();
    GateGuard {
        _guard: gate.lock_owned().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_holder_per_root_and_branch() {
        let held = acquire("memory://gate-test", "main").await;
        // Another branch, or another root, is a different gate.
        let _other_branch = acquire("memory://gate-test", "dev").await;
        let _other_root = acquire("memory://gate-test-2", "main").await;
        let waiting = tokio::spawn(async { acquire("memory://gate-test", "main").await });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the second holder waits");
        drop(held);
        let _second = waiting.await.unwrap();
    }
}
