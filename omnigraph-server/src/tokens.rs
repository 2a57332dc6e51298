//! The tokens file: bearer tokens kept only as SHA-256 hashes, each with a role on one
//! graph or on all of them.
//!
//! A token is 256 random bits, so a plain SHA-256 cannot be reversed or guessed; a
//! password hash (argon2) would only slow every request. A presented token's hash is
//! compared with every entry in constant time (`subtle`), so the time taken says
//! nothing about which entry, or how much of one, matched.
//!
//! The file is JSON (`docs/server.md` shows one), written whole to a temporary file and
//! renamed into place, readable by its owner only. Everything read from it is checked
//! before use: its size, the count of entries, each hash, id, role and graph name.

use crate::limits::{TOKEN_FILE_BYTES_MAX, TOKENS_MAX};
use omnigraph_core::{InputLocation, OmniError, Result};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// The file's format name, checked on read.
const FORMAT: &str = "omnigraph-tokens";
/// The file's version, checked on read.
const VERSION: u32 = 1;
/// What every token starts with, so a leaked one is recognisable by scanners.
const TOKEN_PREFIX: &str = "og_";

/// What a token may do on a graph; each role includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Queries and every read: schema, branches, commits, tables, status, run status.
    Read,
    /// Inserts, loads, updates, deletes, branch creation and merges.
    Write,
    /// Starting and cancelling maintenance (optimize, cleanup).
    Maintain,
    /// Schema changes and branch deletion.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 4] = [Role::Read, Role::Write, Role::Maintain, Role::Admin];

    /// The role's name, as the file and the command line spell it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Maintain => "maintain",
            Role::Admin => "admin",
        }
    }

    /// The role named `name`.
    pub fn parse(name: &str) -> Result<Role> {
        Role::ALL
            .into_iter()
            .find(|role| role.name() == name)
            .ok_or_else(|| {
                OmniError::bad_input(
                    InputLocation::in_source("--role").field(name),
                    "a role is read, write, maintain or admin",
                )
            })
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.name())
    }
}

/// One token's entry: never the token, only its hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenEntry {
    /// The token's public id (`tok_` and 16 hex digits), for listing and revoking.
    pub id: String,
    /// The SHA-256 of the token, in lowercase hex.
    pub sha256: String,
    /// What the token may do.
    pub role: Role,
    /// The graph the role is on; every graph when `None`.
    pub graph: Option<String>,
    /// When the token was made, in microseconds since the epoch.
    pub created_at: i64,
}

impl TokenEntry {
    /// The token's role on `graph`, if it has one.
    pub fn role_on(&self, graph: &str) -> Option<Role> {
        match &self.graph {
            Some(only) if only != graph => None,
            _ => Some(self.role),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct TokenDocument {
    format: String,
    version: u32,
    tokens: Vec<TokenEntry>,
}

/// The tokens of one file.
#[derive(Clone, Debug)]
pub struct TokenFile {
    path: PathBuf,
    entries: Vec<TokenEntry>,
}

impl TokenFile {
    /// The tokens in `path`; none when the file does not exist yet.
    pub fn read_or_empty(path: &Path) -> Result<TokenFile> {
        if !path.exists() {
            return Ok(TokenFile {
                path: path.to_owned(),
                entries: Vec::new(),
            });
        }
        TokenFile::read(path)
    }

    /// The tokens in `path`, checked: the file must exist and hold a valid document.
    pub fn read(path: &Path) -> Result<TokenFile> {
        let name = path.display().to_string();
        let bad = |message: String| OmniError::bad_input(InputLocation::in_source(&name), message);
        let size = std::fs::metadata(path)
            .map_err(|error| bad(format!("cannot read the tokens file: {error}")))?
            .len();
        if size > TOKEN_FILE_BYTES_MAX {
            return Err(bad(format!(
                "the tokens file has {size} bytes, more than {TOKEN_FILE_BYTES_MAX}"
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|error| bad(format!("cannot read the tokens file: {error}")))?;
        let document: TokenDocument = serde_json::from_str(&text)
            .map_err(|error| bad(format!("not a tokens file: {error}")))?;
        if document.format != FORMAT || document.version != VERSION {
            return Err(bad(format!(
                "not a tokens file of version {VERSION} (format {:?}, version {})",
                document.format, document.version
            )));
        }
        if document.tokens.len() > TOKENS_MAX {
            return Err(bad(format!(
                "the tokens file holds {} tokens, more than {TOKENS_MAX}",
                document.tokens.len()
            )));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path)
                .map_err(|error| bad(format!("cannot read the tokens file: {error}")))?
                .permissions()
                .mode();
            // Anyone who can write the file can give themselves any role.
            if mode & 0o022 != 0 {
                return Err(bad(format!(
                    "the tokens file is writable by others (mode {:o}); make it 0600",
                    mode & 0o777
                )));
            }
        }
        let mut ids = std::collections::HashSet::new();
        let mut hashes = std::collections::HashSet::new();
        for (row, entry) in document.tokens.iter().enumerate() {
            let repeated =
                (!ids.insert(entry.id.as_str()))
                    .then_some("a token id appears twice")
                    .or((!hashes.insert(entry.sha256.as_str()))
                        .then_some("a token hash appears twice"));
            check_entry(entry)
                .and(repeated.map_or(Ok(()), |why| Err(why.to_owned())))
                .map_err(|message| {
                    OmniError::bad_input(
                        InputLocation::in_source(&name)
                            .row(row as u64)
                            .field(entry.id.clone()),
                        message,
                    )
                })?;
        }
        Ok(TokenFile {
            path: path.to_owned(),
            entries: document.tokens,
        })
    }

    /// Every entry, in the order they were added.
    pub fn entries(&self) -> &[TokenEntry] {
        &self.entries
    }

    /// Adds a new token with `role` on `graph` (every graph when `None`) and returns its
    /// entry and the token itself, which is never stored: show it once. Call
    /// [`TokenFile::write`] to keep it.
    pub fn add(&mut self, role: Role, graph: Option<&str>) -> Result<(TokenEntry, String)> {
        if let Some(graph) = graph {
            crate::config::check_graph_name(graph)?;
        }
        if self.entries.len() >= TOKENS_MAX {
            return Err(OmniError::bad_input(
                InputLocation::in_source(self.path.display().to_string()),
                format!("the tokens file holds {TOKENS_MAX} tokens, its limit"),
            ));
        }
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        let token = format!("{TOKEN_PREFIX}{}", hex::encode(secret));
        let mut id = [0u8; 8];
        rand::rng().fill_bytes(&mut id);
        let entry = TokenEntry {
            id: format!("tok_{}", hex::encode(id)),
            sha256: hex::encode(Sha256::digest(token.as_bytes())),
            role,
            graph: graph.map(str::to_owned),
            created_at: omnigraph_core::seams::now_micros(),
        };
        debug_assert!(check_entry(&entry).is_ok());
        self.entries.push(entry.clone());
        Ok((entry, token))
    }

    /// Removes the token with `id`; [`OmniError::NotFound`] when there is none.
    pub fn revoke(&mut self, id: &str) -> Result<TokenEntry> {
        let Some(position) = self.entries.iter().position(|entry| entry.id == id) else {
            return Err(OmniError::not_found(format!("token {id:?}")));
        };
        Ok(self.entries.remove(position))
    }

    /// Writes the file whole: a temporary file beside it, renamed into place, readable
    /// by its owner only.
    pub fn write(&self) -> Result<()> {
        let name = self.path.display().to_string();
        let failed = |error: std::io::Error| {
            OmniError::bad_input(
                InputLocation::in_source(&name),
                format!("cannot write the tokens file: {error}"),
            )
        };
        let document = TokenDocument {
            format: FORMAT.to_owned(),
            version: VERSION,
            tokens: self.entries.clone(),
        };
        let text = serde_json::to_string_pretty(&document)
            .map_err(|error| OmniError::internal(error.to_string()))?;
        let folder = match self.path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
            _ => PathBuf::from("."),
        };
        let mut temporary = tempfile::NamedTempFile::new_in(&folder).map_err(failed)?;
        std::io::Write::write_all(&mut temporary, text.as_bytes()).map_err(failed)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(temporary.path(), std::fs::Permissions::from_mode(0o600))
                .map_err(failed)?;
        }
        temporary.as_file().sync_all().map_err(failed)?;
        temporary
            .persist(&self.path)
            .map_err(|error| failed(error.error))?;
        Ok(())
    }

    /// The entry whose hash is the presented token's, comparing with every entry in
    /// constant time.
    pub(crate) fn verify(&self, presented: &str) -> Option<&TokenEntry> {
        let digest = Sha256::digest(presented.as_bytes());
        let mut found = None;
        for entry in &self.entries {
            // Checked on read: every hash decodes to 32 bytes.
            let Ok(stored) = hex::decode(&entry.sha256) else {
                continue;
            };
            if bool::from(stored.as_slice().ct_eq(digest.as_slice())) {
                found = Some(entry);
            }
        }
        found
    }
}

/// Checks a graph name as a server and the tokens file take it.
pub fn check_graph_name(name: &str) -> Result<()> {
    crate::config::check_graph_name(name)
}

/// Why an entry read from a file cannot be used, if it cannot.
fn check_entry(entry: &TokenEntry) -> std::result::Result<(), String> {
    let hex_digits = |text: &str, len: usize| {
        text.len() == len
            && text
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
    };
    if !entry
        .id
        .strip_prefix("tok_")
        .is_some_and(|digits| hex_digits(digits, 16))
    {
        return Err("a token id is tok_ and 16 lowercase hex digits".to_owned());
    }
    if !hex_digits(&entry.sha256, 64) {
        return Err("a token's sha256 is 64 lowercase hex digits".to_owned());
    }
    if let Some(graph) = &entry.graph {
        crate::config::check_graph_name(graph).map_err(|error| error.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_verified_by_its_hash_and_only_its_own() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("tokens.json");
        let mut file = TokenFile::read_or_empty(&path).unwrap();
        let (reader, read_token) = file.add(Role::Read, Some("people")).unwrap();
        let (_, admin_token) = file.add(Role::Admin, None).unwrap();
        file.write().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&read_token) && !text.contains(&admin_token));
        let file = TokenFile::read(&path).unwrap();
        let found = file.verify(&read_token).unwrap();
        assert_eq!(found, &reader);
        assert_eq!(found.role_on("people"), Some(Role::Read));
        assert_eq!(found.role_on("other"), None);
        assert_eq!(
            file.verify(&admin_token).unwrap().role_on("other"),
            Some(Role::Admin)
        );
        let mut wrong = read_token.clone();
        wrong.pop();
        wrong.push('x');
        assert!(file.verify(&wrong).is_none());
        assert!(file.verify("").is_none());
    }

    #[test]
    fn a_damaged_file_is_refused_naming_the_entry() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("tokens.json");
        let mut file = TokenFile::read_or_empty(&path).unwrap();
        file.add(Role::Write, None).unwrap();
        file.write().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"write\"", "\"root\"")).unwrap();
        assert!(matches!(
            TokenFile::read(&path),
            Err(OmniError::BadInput { .. })
        ));
        let mut file = TokenFile::read_or_empty(&folder.path().join("other.json")).unwrap();
        let (entry, _) = file.add(Role::Write, None).unwrap();
        let mut document: serde_json::Value = serde_json::to_value(&entry).unwrap();
        document["graph"] = serde_json::json!("../up");
        let damaged =
            serde_json::json!({"format": FORMAT, "version": VERSION, "tokens": [document]});
        std::fs::write(&path, damaged.to_string()).unwrap();
        let error = TokenFile::read(&path).unwrap_err();
        assert!(error.to_string().contains(&entry.id), "{error}");
    }
}
