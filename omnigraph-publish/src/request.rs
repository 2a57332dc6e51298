//! The request a write serves, carried by the task that runs it (as a tracing span is):
//! a host that writes for many callers through one shared handle says, per write, who
//! the commit is for and which request it answers. Every commit a branch writer
//! publishes inside [`WriteRequest::serve`] records them, so a host runs maintenance
//! outside it (the server runs each run in a task of its own); branch records and
//! reservations do not go through a branch writer and record neither.

use crate::limits::{
    IDEMPOTENCY_FINGERPRINT_BYTES_MAX, IDEMPOTENCY_KEY_BYTES_MAX, IDEMPOTENCY_KEYS_PER_COMMIT_MAX,
};
use omnigraph_core::{InputLocation, OmniError, Result};
use std::future::Future;

/// Who a write is for and which request it answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteRequest {
    /// The actor its commits record instead of the handle's.
    pub actor: Option<String>,
    /// The caller's keys for the request (one per request it answers; a host that
    /// publishes several requests in one commit gives each one's): a retry with one of
    /// them finds the commit this one published (`GraphCommit::idempotency_keys`).
    /// Each valid ([`check_idempotency_key`]) and given once, at most
    /// [`IDEMPOTENCY_KEYS_PER_COMMIT_MAX`].
    pub idempotency_keys: Vec<String>,
    /// The fingerprint of the request each key came with, in the keys' order: empty,
    /// or one per key (`GraphCommit::idempotency_fingerprints`). A host that finds a
    /// key landed compares the fingerprints, and refuses a retry whose request differs.
    pub idempotency_fingerprints: Vec<String>,
}

tokio::task_local! {
    static SERVING: WriteRequest;
}

impl WriteRequest {
    /// Runs `write` serving this request. A request a commit could not record
    /// ([`WriteRequest::check`]) is refused before `write` runs: `bad_input` with
    /// `before_effect`, nothing written. (A prepared write that `write` would publish
    /// keeps what it staged before, unpublished.)
    pub async fn serve<T, F: Future<Output = Result<T>>>(self, write: F) -> Result<T> {
        self.check()?;
        SERVING.scope(self, write).await
    }

    /// The request the current task serves, if any.
    pub(crate) fn current() -> Option<WriteRequest> {
        SERVING.try_with(Clone::clone).ok()
    }
}

/// Checks an idempotency key a caller gave: 1 to [`IDEMPOTENCY_KEY_BYTES_MAX`] bytes of
/// printable ASCII (it is stored in commit objects and compared byte for byte).
pub fn check_idempotency_key(key: &str) -> Result<()> {
    if key_is_valid(key) {
        return Ok(());
    }
    Err(OmniError::bad_input(
        InputLocation::in_source("Idempotency-Key"),
        format!("an idempotency key is 1 to {IDEMPOTENCY_KEY_BYTES_MAX} bytes of printable ASCII"),
    ))
}

impl WriteRequest {
    /// Checks what a commit serving this request records: each key valid
    /// ([`check_idempotency_key`]) and given once, at most
    /// [`IDEMPOTENCY_KEYS_PER_COMMIT_MAX`] of them, and no fingerprint or one per key,
    /// each 1 to [`IDEMPOTENCY_FINGERPRINT_BYTES_MAX`] bytes of printable ASCII without
    /// spaces. A
    /// commit that broke these would be refused by every reader of the log.
    pub fn check(&self) -> Result<()> {
        match unrecordable(&self.idempotency_keys, &self.idempotency_fingerprints) {
            None => Ok(()),
            Some(why) => Err(OmniError::bad_input(
                InputLocation::in_source("write request"),
                why,
            )),
        }
    }
}

/// Why a commit may not record `keys` with `fingerprints`, when it may not: the one
/// rule a writer checks before it publishes ([`WriteRequest::check`]) and a reader
/// after it reads (`GraphCommit::validate`).
pub(crate) fn unrecordable(keys: &[String], fingerprints: &[String]) -> Option<String> {
    if keys.len() > IDEMPOTENCY_KEYS_PER_COMMIT_MAX {
        return Some(format!(
            "{} idempotency keys; the limit is {IDEMPOTENCY_KEYS_PER_COMMIT_MAX}",
            keys.len()
        ));
    }
    if let Some(key) = keys.iter().find(|key| !key_is_valid(key)) {
        return Some(format!(
            "idempotency key {key:?} is not 1 to {IDEMPOTENCY_KEY_BYTES_MAX} bytes of printable ASCII"
        ));
    }
    let distinct: std::collections::BTreeSet<&String> = keys.iter().collect();
    if distinct.len() != keys.len() {
        return Some("an idempotency key given twice".into());
    }
    if !fingerprints.is_empty() && fingerprints.len() != keys.len() {
        return Some(format!(
            "{} idempotency fingerprints for {} keys: none, or one per key",
            fingerprints.len(),
            keys.len()
        ));
    }
    fingerprints
        .iter()
        .find(|fingerprint| !fingerprint_is_valid(fingerprint))
        .map(|fingerprint| {
            format!(
                "idempotency fingerprint {fingerprint:?} is not 1 to \
                 {IDEMPOTENCY_FINGERPRINT_BYTES_MAX} bytes of printable ASCII without spaces"
            )
        })
}

/// Whether `fingerprint` is 1 to [`IDEMPOTENCY_FINGERPRINT_BYTES_MAX`] bytes of
/// printable ASCII without spaces.
fn fingerprint_is_valid(fingerprint: &str) -> bool {
    !fingerprint.is_empty()
        && fingerprint.len() <= IDEMPOTENCY_FINGERPRINT_BYTES_MAX
        && fingerprint.bytes().all(|byte| byte.is_ascii_graphic())
}

/// Whether `key` is 1 to [`IDEMPOTENCY_KEY_BYTES_MAX`] bytes of printable ASCII.
fn key_is_valid(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= IDEMPOTENCY_KEY_BYTES_MAX
        && key
            .bytes()
            .all(|byte| byte.is_ascii_graphic() || byte == b' ')
}

#[cfg(test)]
mod tests {
    use super::WriteRequest;
    use omnigraph_core::ErrorKind;

    #[test]
    fn a_request_a_commit_could_not_record_is_refused_as_bad_input() {
        let request = |keys: &[&str], fingerprints: &[&str]| WriteRequest {
            actor: None,
            idempotency_keys: keys.iter().map(|key| key.to_string()).collect(),
            idempotency_fingerprints: fingerprints.iter().map(|f| f.to_string()).collect(),
        };
        let hex = "a".repeat(64);
        assert!(request(&["k1", "k2"], &[]).check().is_ok());
        assert!(request(&["k1", "k2"], &[&hex, &hex]).check().is_ok());
        let long = "f".repeat(129);
        for refused in [
            request(&["k1", "k2"], &[&hex]),
            request(&["k1"], &[&long]),
            request(&["k1"], &[""]),
            request(&["k1", "k1"], &[]),
            request(&[""], &[]),
        ] {
            let error = refused.check().unwrap_err();
            assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
        }
    }
}
