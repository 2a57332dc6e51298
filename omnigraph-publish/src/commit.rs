//! The graph commit (`docs/format.md` §5): one immutable JSON object per publication. A snapshot
//! is one commit; reading it is one GET.

use crate::layout;
use crate::limits::{
    ACTOR_LEN_MAX, COMMIT_ID_LEN_MAX, MERGED_FROM_MAX, OPERATION_KIND_LEN_MAX, SUMMARY_LEN_MAX,
};
use crate::reservation::{self, Reservation};
use omnigraph_core::{OmniError, Result};
use std::collections::HashSet;

/// Whether a pinned table holds a node type or an edge type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableKind {
    /// A node type's table.
    Node,
    /// An edge type's table.
    Edge,
}

/// The exact version of one table that a commit makes visible.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TablePin {
    /// The minted table id (never derived from the type name).
    pub table_id: String,
    /// The type the table holds.
    pub type_name: String,
    /// Node or edge.
    pub kind: TableKind,
    /// The table's folder under the root (`tables/<table_id>`).
    pub path: String,
    /// The Lance version readers open: 1 (the creation) or a detached version.
    pub version: u64,
    /// Rows visible at that version.
    pub row_count: u64,
}

/// What a commit did, for logs and humans.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommitOperation {
    /// The writer: `init`, `insert`, `load`, `update`, `delete`, `schema_apply`,
    /// `optimize`, `build_indexes`, ….
    pub kind: String,
    /// A short summary (`3 rows into Person`).
    pub summary: String,
}

/// One graph commit.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GraphCommit {
    /// Position in the branch's log: genesis is 0, each publication adds 1.
    pub seq: u64,
    /// A unique id (from the id seam).
    pub commit_id: String,
    /// The commit this one was published on; `None` for genesis.
    pub parent_commit_id: Option<String>,
    /// The branch.
    pub branch: String,
    /// Microseconds since the epoch (from the clock seam).
    pub created_at: i64,
    /// Who published it.
    pub actor: String,
    /// What it did.
    pub operation: CommitOperation,
    /// The hash of the schema document in force.
    pub schema: String,
    /// Every table's pin, one per type. The order carries no meaning: a schema change
    /// appends the pins of new tables.
    pub pins: Vec<TablePin>,
    /// What cleanup last recorded on this branch, carried forward by every commit after
    /// it; `None` until cleanup first runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    /// Where this branch's life began, when it was created from another branch (every
    /// commit of the life carries it forward); `None` on a life that began at genesis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkPoint>,
    /// Whether this commit deleted its branch: it pins nothing, retains only itself,
    /// and nothing is published after it but a new life's first commit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// The newest commit of each branch merged into this branch's life, at most
    /// [`MERGED_FROM_MAX`] (past it a merge drops the entries of branches whose life
    /// ended, and is refused when all are live): the base of the next merge from that
    /// branch. Carried forward by every commit of the life.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<MergedFrom>,
    /// The tables writers hold for a short lease (`docs/format.md` §7.7), carried
    /// forward by every commit while they hold, up to
    /// [`crate::limits::RESERVATIONS_MAX`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<Reservation>,
    /// The keys of the requests this commit answers (a served write's
    /// `Idempotency-Key`, [`crate::request::WriteRequest`]; several when a host
    /// published several requests in one commit), each once, at most
    /// [`IDEMPOTENCY_KEYS_PER_COMMIT_MAX`](crate::limits::IDEMPOTENCY_KEYS_PER_COMMIT_MAX):
    /// a retry of one of them finds this commit instead of writing again. Never carried
    /// forward. Read also from `idempotency_key`, one string, as builds before group
    /// commit wrote it.
    #[serde(
        default,
        alias = "idempotency_key",
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub idempotency_keys: Vec<String>,
    /// For each of [`GraphCommit::idempotency_keys`], in order, the fingerprint of the
    /// request it came with (1 to 128 bytes of printable ASCII without spaces, of what
    /// the host says makes two requests the same; the server writes `og1-sha256:` and
    /// a SHA-256 in hex): empty when the writer gave none, as builds before
    /// fingerprints did. Never carried forward.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idempotency_fingerprints: Vec<String>,
}

/// Keys given as one string (as builds before group commit wrote them) or a list.
fn one_or_many<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Vec<String>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match serde::Deserialize::deserialize(deserializer)? {
        OneOrMany::One(key) => vec![key],
        OneOrMany::Many(keys) => keys,
    })
}

/// A commit of another branch whose tables a merge took.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MergedFrom {
    /// The branch merged from.
    pub branch: String,
    /// The seq of its commit that was merged.
    pub seq: u64,
    /// That commit's id.
    pub commit_id: String,
}

/// The commit a branch was created from (`docs/format.md` §5.1). The first commit of
/// the branch's life pins what that commit pins; its parent is the commit before it in
/// the branch's own log (none at seq 0, else the commit that deleted the life before).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ForkPoint {
    /// The branch it was created from.
    pub branch: String,
    /// The seq of the commit it was created from, on that branch.
    pub seq: u64,
    /// The id of that commit.
    pub commit_id: String,
    /// When the branch was created (microseconds since the epoch): its first commit's
    /// time, carried with the fork point so a branch's age costs no read.
    pub created_at: i64,
}

/// Cleanup's record on a branch (`docs/format.md` §8.1): it lives in the log, so a
/// writer learns the grace period from the head it publishes on, and a reader learns
/// which commits are reclaimed from the head, with no object of cleanup's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Retention {
    /// The grace period of the last cleanup run, in microseconds.
    pub grace_micros: i64,
    /// The oldest commit of the branch whose table versions are retained.
    pub oldest_retained: u64,
}

impl Retention {
    /// The grace period.
    pub fn grace(&self) -> std::time::Duration {
        std::time::Duration::from_micros(u64::try_from(self.grace_micros).unwrap_or(0))
    }

    /// `self`, never retaining from an older commit than `earlier` did (the oldest
    /// retained commit of a branch only moves forward), nor with a shorter grace period:
    /// a writer that checked its staging against the longer one may still publish, and
    /// a cleanup that planned with the shorter one would delete its files. Only an
    /// explicit [`Retention::lowering_grace_after`] shortens it.
    pub fn after(self, earlier: Option<Retention>) -> Retention {
        Retention {
            grace_micros: earlier.map_or(self.grace_micros, |earlier| {
                earlier.grace_micros.max(self.grace_micros)
            }),
            ..self.lowering_grace_after(earlier)
        }
    }

    /// [`Retention::after`], but with `self`'s grace period even when it is shorter:
    /// an operator's explicit lowering (no other cleanup with a longer one may run).
    pub fn lowering_grace_after(self, earlier: Option<Retention>) -> Retention {
        Retention {
            grace_micros: self.grace_micros,
            oldest_retained: earlier.map_or(self.oldest_retained, |earlier| {
                earlier.oldest_retained.max(self.oldest_retained)
            }),
        }
    }
}

impl GraphCommit {
    /// Whether this commit, of the same branch as `earlier`, is in the life `earlier`
    /// belongs to, still going: not its deletion, nor a commit of a life created since
    /// (every commit of a life carries the life's `fork`, and no two lives share one).
    pub fn continues_life_of(&self, earlier: &GraphCommit) -> bool {
        assert_eq!(self.branch, earlier.branch, "lives are of one branch");
        !self.deleted && self.fork == earlier.fork
    }

    /// The pin of a table by id.
    pub fn pin(&self, table_id: &str) -> Option<&TablePin> {
        self.pins.iter().find(|pin| pin.table_id == table_id)
    }

    /// The pin of the table holding `type_name`.
    pub fn pin_of_type(&self, type_name: &str) -> Option<&TablePin> {
        self.pins.iter().find(|pin| pin.type_name == type_name)
    }

    /// The pin of a table by id, or a typed `NotFound` naming this commit.
    pub fn require_pin(&self, table_id: &str) -> Result<&TablePin> {
        self.pin(table_id)
            .ok_or_else(|| OmniError::not_found(format!("table {table_id} in commit {}", self.seq)))
    }

    /// The pin of the table holding `type_name`, or a typed `NotFound`.
    pub fn require_pin_of_type(&self, type_name: &str) -> Result<&TablePin> {
        self.pin_of_type(type_name)
            .ok_or_else(|| OmniError::not_found(format!("type {type_name} in commit {}", self.seq)))
    }

    /// The stored bytes.
    pub fn to_bytes(&self) -> Result<bytes::Bytes> {
        serde_json::to_vec(self)
            .map(bytes::Bytes::from)
            .map_err(|error| OmniError::internal(format!("encode commit {}: {error}", self.seq)))
    }

    /// Parses a stored commit, checking that it is the object its path says it is.
    pub fn parse(object: &str, bytes: &[u8], branch: &str, seq: u64) -> Result<GraphCommit> {
        let commit: GraphCommit = serde_json::from_slice(bytes).map_err(|error| {
            OmniError::corrupt(
                object,
                format!("not a graph commit ({} bytes): {error}", bytes.len()),
            )
        })?;
        if commit.seq != seq || commit.branch != branch {
            return Err(OmniError::corrupt(
                object,
                format!(
                    "holds commit seq {} of branch {:?}, not seq {seq} of {branch:?}",
                    commit.seq, commit.branch
                ),
            ));
        }
        commit
            .validate()
            .map_err(|message| OmniError::corrupt(object, message))?;
        // What every reader relies on, as checked: the object is the commit its path
        // names, and every pin is its table's folder at a version a commit may pin.
        assert!(commit.seq == seq && commit.branch == branch);
        assert!(layout::is_schema_hash(&commit.schema));
        assert!(
            commit
                .pins
                .iter()
                .all(|pin| pin.path == layout::table_path(&pin.table_id)
                    && layout::is_pinnable_version(pin.version))
        );
        Ok(commit)
    }

    /// Checks every field a reader or writer relies on: run after every read and
    /// before every write. Ids and the schema hash become parts of paths, so they are
    /// held to a strict alphabet; a pin's path must be its table's own folder.
    pub fn validate(&self) -> std::result::Result<(), String> {
        layout::check_branch(&self.branch)
            .map_err(|_| format!("branch {:?} is not a valid branch name", self.branch))?;
        check_id("commit_id", &self.commit_id)?;
        match (&self.parent_commit_id, self.seq) {
            (None, 0) => {}
            (Some(parent), seq) if seq > 0 => check_id("parent_commit_id", parent)?,
            _ => return Err("only a log's first commit (seq 0) has no parent".into()),
        }
        if let Some(fork) = &self.fork {
            layout::check_branch(&fork.branch).map_err(|_| {
                format!(
                    "it was created from {:?}, not a valid branch name",
                    fork.branch
                )
            })?;
            check_id("fork.commit_id", &fork.commit_id)?;
            if fork.branch == self.branch {
                return Err("a branch is never created from itself".into());
            }
        }
        if self.merged_from.len() > MERGED_FROM_MAX {
            return Err(format!(
                "it remembers {} merges; the limit is {MERGED_FROM_MAX}",
                self.merged_from.len()
            ));
        }
        let mut merged = HashSet::new();
        for from in &self.merged_from {
            layout::check_branch(&from.branch).map_err(|_| {
                format!("it merged from {:?}, not a valid branch name", from.branch)
            })?;
            check_id("merged_from.commit_id", &from.commit_id)?;
            if !merged.insert(from.branch.as_str()) || from.branch == self.branch {
                return Err(format!(
                    "it names its merges from {} twice, or from itself",
                    from.branch
                ));
            }
        }
        if self.deleted
            && (!self.pins.is_empty()
                || self.retention.map(|retention| retention.oldest_retained) != Some(self.seq))
        {
            return Err(
                "a deleted branch's last commit pins nothing and retains only itself".into(),
            );
        }
        if !layout::is_schema_hash(&self.schema) {
            return Err(format!(
                "schema {:?} is not a SHA-256 hash in lowercase hex",
                self.schema
            ));
        }
        if let Some(why) =
            crate::request::unrecordable(&self.idempotency_keys, &self.idempotency_fingerprints)
        {
            return Err(why);
        }
        if self.actor.len() > ACTOR_LEN_MAX {
            return Err(format!(
                "actor is {} bytes; the limit is {ACTOR_LEN_MAX}",
                self.actor.len()
            ));
        }
        let kind = &self.operation.kind;
        if kind.is_empty()
            || kind.len() > OPERATION_KIND_LEN_MAX
            || !kind
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(format!("operation kind {kind:?} is not a snake_case word"));
        }
        reservation::validate(&self.reservations)?;
        if self.pins.len() > omnigraph_core::limits::TYPES_MAX {
            return Err(format!(
                "{} pins; a schema has at most {} types",
                self.pins.len(),
                omnigraph_core::limits::TYPES_MAX
            ));
        }
        if let Some(retention) = &self.retention {
            let floor = crate::retention::micros_of(crate::limits::GRACE_MIN);
            if retention.grace_micros < floor {
                return Err(format!(
                    "the recorded grace period of {} µs is below the floor of {floor} µs",
                    retention.grace_micros
                ));
            }
            if retention.oldest_retained > self.seq {
                return Err(format!(
                    "it retains from commit {}, past itself",
                    retention.oldest_retained
                ));
            }
        }
        let (mut ids, mut types) = (HashSet::new(), HashSet::new());
        for pin in &self.pins {
            layout::check_table_id(&pin.table_id)?;
            if pin.path != layout::table_path(&pin.table_id) {
                return Err(format!(
                    "the pin of table {} has path {:?}, not its folder {:?}",
                    pin.table_id,
                    pin.path,
                    layout::table_path(&pin.table_id)
                ));
            }
            if !omnigraph_core::schema::is_identifier(&pin.type_name) {
                return Err(format!(
                    "type name {:?} is not an identifier",
                    pin.type_name
                ));
            }
            if !layout::is_pinnable_version(pin.version) {
                return Err(format!(
                    "table {} is pinned at version {}: neither its creation (1) nor a detached version",
                    pin.table_id, pin.version
                ));
            }
            if !ids.insert(pin.table_id.as_str()) {
                return Err(format!("table {} is pinned twice", pin.table_id));
            }
            if !types.insert(pin.type_name.as_str()) {
                return Err(format!("type {} is pinned twice", pin.type_name));
            }
        }
        Ok(())
    }
}

/// `summary`, cut to at most [`SUMMARY_LEN_MAX`] bytes on a character boundary, with
/// `…` when it was cut.
pub(crate) fn shortened_summary(summary: &str) -> String {
    if summary.len() <= SUMMARY_LEN_MAX {
        return summary.to_string();
    }
    let ellipsis = "…";
    let mut end = SUMMARY_LEN_MAX - ellipsis.len();
    while !summary.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &summary[..end])
}

/// Checks an id that may become part of a path or a filter.
pub(crate) fn check_id(field: &str, id: &str) -> std::result::Result<(), String> {
    let valid = !id.is_empty()
        && id.len() <= COMMIT_ID_LEN_MAX
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{field} {id:?} must be 1 to {COMMIT_ID_LEN_MAX} ASCII letters, digits, '-' or '_'"
        ))
    }
}

/// A commit of `branch` at `seq` that pins nothing, for unit tests: its id is the branch
/// and seq, its parent the one before.
#[cfg(test)]
pub(crate) fn test_commit(branch: &str, seq: u64) -> GraphCommit {
    GraphCommit {
        seq,
        commit_id: format!("{branch}{seq}"),
        parent_commit_id: (seq > 0).then(|| format!("{branch}{}", seq - 1)),
        branch: branch.into(),
        created_at: 0,
        actor: "test".into(),
        operation: CommitOperation {
            kind: "test".into(),
            summary: String::new(),
        },
        schema: "0".repeat(64),
        pins: Vec::new(),
        retention: None,
        fork: None,
        deleted: false,
        merged_from: Vec::new(),
        reservations: Vec::new(),
        idempotency_keys: Vec::new(),
        idempotency_fingerprints: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn genesis() -> GraphCommit {
        test_commit("main", 0)
    }

    #[test]
    fn a_retention_record_past_its_commit_or_below_the_grace_floor_is_refused() {
        let mut commit = genesis();
        assert_eq!(commit.validate(), Ok(()));
        let grace_micros = crate::retention::micros_of(crate::limits::GRACE_MIN);
        commit.retention = Some(Retention {
            grace_micros,
            oldest_retained: 0,
        });
        assert_eq!(commit.validate(), Ok(()));
        commit.retention = Some(Retention {
            grace_micros,
            oldest_retained: 1,
        });
        assert!(commit.validate().unwrap_err().contains("past itself"));
        commit.retention = Some(Retention {
            grace_micros: grace_micros - 1,
            oldest_retained: 0,
        });
        assert!(commit.validate().unwrap_err().contains("below the floor"));
        // A commit written before cleanup ran has no record, and reads back as such.
        let bytes = genesis().to_bytes().unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("retention"));
        let parsed = GraphCommit::parse("c", &bytes, "main", 0).unwrap();
        assert_eq!(parsed.retention, None);
    }

    #[test]
    fn the_oldest_retained_commit_only_moves_forward() {
        let record = |oldest_retained| Retention {
            grace_micros: 60_000_000,
            oldest_retained,
        };
        assert_eq!(record(3).after(Some(record(5))).oldest_retained, 5);
        assert_eq!(record(7).after(Some(record(5))).oldest_retained, 7);
        assert_eq!(record(2).after(None).oldest_retained, 2);
        // The grace period never shortens but when asked to.
        let long = Retention {
            grace_micros: 7_200_000_000,
            oldest_retained: 1,
        };
        let short = Retention {
            grace_micros: 60_000_000,
            oldest_retained: 4,
        };
        assert_eq!(short.after(Some(long)).grace_micros, 7_200_000_000);
        assert_eq!(short.after(Some(long)).oldest_retained, 4);
        assert_eq!(long.after(Some(short)).grace_micros, 7_200_000_000);
        assert_eq!(
            short.lowering_grace_after(Some(long)).grace_micros,
            60_000_000
        );
        assert_eq!(long.lowering_grace_after(Some(short)).oldest_retained, 4);
    }

    #[test]
    fn idempotency_keys_read_as_a_list_or_as_the_one_key_builds_before_wrote() {
        let mut commit = genesis();
        commit.idempotency_keys = vec!["k1".into(), "k2".into()];
        let bytes = commit.to_bytes().unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        assert!(text.contains(r#""idempotency_keys":["k1","k2"]"#), "{text}");
        let parsed = GraphCommit::parse("c", &bytes, "main", 0).unwrap();
        assert_eq!(parsed.idempotency_keys, ["k1", "k2"]);
        // As the first build with keys wrote one: a string under the old name.
        let old = text.replace(
            r#""idempotency_keys":["k1","k2"]"#,
            r#""idempotency_key":"k0""#,
        );
        let parsed = GraphCommit::parse("c", old.as_bytes(), "main", 0).unwrap();
        assert_eq!(parsed.idempotency_keys, ["k0"]);
        // None: absent, and read back as none.
        let bytes = genesis().to_bytes().unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("idempotency"));
        let parsed = GraphCommit::parse("c", &bytes, "main", 0).unwrap();
        assert!(parsed.idempotency_keys.is_empty());
        // Refused on read: a key twice, an empty key, more than a commit may hold.
        commit.idempotency_keys = vec!["k1".into(), "k1".into()];
        assert!(commit.validate().unwrap_err().contains("twice"));
        commit.idempotency_keys = vec![String::new()];
        assert!(commit.validate().unwrap_err().contains("printable ASCII"));
        commit.idempotency_keys = (0..=crate::limits::IDEMPOTENCY_KEYS_PER_COMMIT_MAX)
            .map(|n| format!("k{n}"))
            .collect();
        assert!(commit.validate().unwrap_err().contains("the limit is"));
        let bytes = commit.to_bytes().unwrap();
        assert!(GraphCommit::parse("c", &bytes, "main", 0).is_err());
    }

    #[test]
    fn idempotency_fingerprints_are_none_or_one_hash_per_key() {
        let mut commit = genesis();
        commit.idempotency_keys = vec!["k1".into(), "k2".into()];
        let (a, b) = ("a".repeat(64), "0123456789abcdef".repeat(4));
        commit.idempotency_fingerprints = vec![a.clone(), b.clone()];
        let bytes = commit.to_bytes().unwrap();
        let parsed = GraphCommit::parse("c", &bytes, "main", 0).unwrap();
        assert_eq!(parsed.idempotency_fingerprints, [a.clone(), b]);
        // A commit before fingerprints: keys without them.
        commit.idempotency_fingerprints.clear();
        let bytes = commit.to_bytes().unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("fingerprints"));
        assert!(GraphCommit::parse("c", &bytes, "main", 0).is_ok());
        // Refused: one for two keys, an empty one, one past 128 bytes.
        commit.idempotency_fingerprints = vec![a.clone()];
        assert!(commit.validate().unwrap_err().contains("one per key"));
        commit.idempotency_fingerprints = vec![a.clone(), "A".repeat(64)];
        assert!(
            commit.validate().is_ok(),
            "another build's fingerprint reads"
        );
        commit.idempotency_fingerprints = vec![a.clone(), String::new()];
        assert!(commit.validate().unwrap_err().contains("printable ASCII"));
        commit.idempotency_fingerprints = vec![a, "f".repeat(129)];
        assert!(commit.validate().unwrap_err().contains("printable ASCII"));
    }

    #[test]
    fn a_long_summary_is_cut_on_a_character_boundary() {
        assert_eq!(
            shortened_summary("3 rows into Person"),
            "3 rows into Person"
        );
        let long = "é".repeat(SUMMARY_LEN_MAX);
        let short = shortened_summary(&long);
        assert!(short.len() <= SUMMARY_LEN_MAX);
        assert!(short.ends_with('…'));
        assert!(short.trim_end_matches('…').chars().all(|c| c == 'é'));
    }
}
