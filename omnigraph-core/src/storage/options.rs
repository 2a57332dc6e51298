//! Settings for a root's object store, beyond what its URI and the environment say: for
//! S3, the endpoint, region, credentials and the like (`--storage-option KEY=VALUE`).

use crate::error::{InputLocation, OmniError, Result};
use crate::limits::{STORAGE_OPTION_LEN_MAX, STORAGE_OPTIONS_MAX};
use std::collections::BTreeMap;

/// A root's storage options, by key. Empty by default: the environment decides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorageOptions(BTreeMap<String, String>);

impl StorageOptions {
    /// No options.
    pub fn new() -> StorageOptions {
        StorageOptions::default()
    }

    /// The same, with `key` set to `value` (a later value for a key replaces it).
    pub fn with(mut self, key: &str, value: &str) -> Result<StorageOptions> {
        let bad = |message: String| {
            OmniError::bad_input(
                InputLocation::in_source("storage option").field(key),
                message,
            )
        };
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(bad(
                "a storage option's key is letters, digits and '_'".into()
            ));
        }
        if value.len() > STORAGE_OPTION_LEN_MAX {
            return Err(bad(format!(
                "the value is longer than {STORAGE_OPTION_LEN_MAX} bytes"
            )));
        }
        if !self.0.contains_key(key) && self.0.len() >= STORAGE_OPTIONS_MAX {
            return Err(bad(format!(
                "more than {STORAGE_OPTIONS_MAX} storage options"
            )));
        }
        self.0.insert(key.to_ascii_lowercase(), value.to_string());
        Ok(self)
    }

    /// Parses `KEY=VALUE`.
    pub fn with_pair(self, pair: &str) -> Result<StorageOptions> {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(OmniError::bad_input(
                InputLocation::in_source("storage option").field(pair),
                "expected KEY=VALUE",
            ));
        };
        self.with(key.trim(), value)
    }

    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// The options, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_as_they_are_set() {
        let options = StorageOptions::new()
            .with_pair("endpoint=http://127.0.0.1:9400")
            .unwrap()
            .with_pair("REGION=us-east-1")
            .unwrap();
        assert_eq!(
            options.iter().collect::<Vec<_>>(),
            [
                ("endpoint", "http://127.0.0.1:9400"),
                ("region", "us-east-1")
            ]
        );
        assert!(StorageOptions::new().with_pair("endpoint").is_err());
        assert!(StorageOptions::new().with_pair("end point=x").is_err());
        assert!(StorageOptions::new().with_pair("=x").is_err());
    }
}
