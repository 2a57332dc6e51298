//! The compact history of reclaimed commits (`docs/format.md` §8.4). Cleanup reclaims
//! the commit objects below each branch's *floor* so that metadata stops growing with
//! the number of writes; before it deletes one, it writes what `omnigraph log` shows of
//! it (seq, id, parent, time, actor, operation) into an immutable chunk under
//! `_graph/branches/<branch>/history/`. The chunks are the floor's only record: the
//! floor is where the run of chunks that starts at seq 0 ends. Every commit below the
//! floor is reclaimed (its versions were, long before), and a commit object found below
//! it is a leftover that readers ignore and the next cleanup deletes.

use crate::commit::{CommitOperation, GraphCommit};
use crate::layout;
use crate::limits::{
    HISTORY_CHUNK_BYTES_MAX, HISTORY_CHUNK_COMMITS_MAX, HISTORY_CHUNKS_MAX, HISTORY_COVER_AGE_MIN,
    HISTORY_LINES_BYTES_MAX, HISTORY_RELISTS_MAX, HISTORY_SUMMARY_CHARS_MAX,
};
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{OmniError, Result};
use std::io::{Read, Write};

/// What the history keeps of one reclaimed commit.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryEntry {
    /// Its seq.
    pub seq: u64,
    /// Its commit id.
    #[serde(rename = "id")]
    pub commit_id: String,
    /// Its parent's id (`None` for genesis).
    #[serde(rename = "parent")]
    pub parent_commit_id: Option<String>,
    /// When it was published (microseconds since the epoch).
    #[serde(rename = "at")]
    pub created_at: i64,
    /// Who published it.
    pub actor: String,
    /// What it did (the summary cut to [`HISTORY_SUMMARY_CHARS_MAX`] characters).
    #[serde(rename = "op")]
    pub operation: CommitOperation,
}

impl HistoryEntry {
    /// What the history keeps of `commit`.
    pub fn of(commit: &GraphCommit) -> HistoryEntry {
        HistoryEntry {
            seq: commit.seq,
            commit_id: commit.commit_id.clone(),
            parent_commit_id: commit.parent_commit_id.clone(),
            created_at: commit.created_at,
            actor: commit.actor.clone(),
            operation: CommitOperation {
                kind: commit.operation.kind.clone(),
                summary: commit
                    .operation
                    .summary
                    .chars()
                    .take(HISTORY_SUMMARY_CHARS_MAX)
                    .collect(),
            },
        }
    }

    /// Checks an entry read back: the ids it names are ids, and it is the seq it is
    /// listed at.
    fn validate(&self, path: &str, seq: u64) -> Result<()> {
        let refuse = |message: String| OmniError::corrupt(path, message);
        if self.seq != seq {
            return Err(refuse(format!("line for seq {seq} holds seq {}", self.seq)));
        }
        crate::commit::check_id("id", &self.commit_id).map_err(refuse)?;
        if let Some(parent) = &self.parent_commit_id {
            crate::commit::check_id("parent", parent).map_err(refuse)?;
        }
        Ok(())
    }
}

/// The reclaimed part of one branch's log, as its history folder lists it (one LIST).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    branch: String,
    /// When each chunk was written (the engine's clock), by its seqs `from..to`.
    written: std::collections::BTreeMap<(u64, u64), i64>,
    floor: u64,
}

impl History {
    /// Lists the history of `branch`.
    pub async fn read(root: &StorageRoot, branch: &str) -> Result<History> {
        let names = root.list_with_meta(&layout::history_dir(branch)).await?;
        if names.len() > HISTORY_CHUNKS_MAX {
            return Err(OmniError::corrupt(
                layout::history_dir(branch),
                format!(
                    "{} history chunks; the limit is {HISTORY_CHUNKS_MAX}",
                    names.len()
                ),
            ));
        }
        // Only a chunk at its own path: a file in a subfolder that merely ends like one
        // is none (a reader would never find it, and it must cover nothing).
        let written: std::collections::BTreeMap<(u64, u64), i64> = names
            .iter()
            .filter_map(|object| {
                let (from, to) = layout::history_chunk_range(&object.path)?;
                (object.path == layout::history_chunk_path(branch, from, to))
                    .then_some(((from, to), object.modified_micros))
            })
            .collect();
        // Chunks may overlap (two runs that reclaimed at once): the floor is where the
        // run that starts at genesis ends.
        let mut floor = 0;
        for (from, to) in written.keys() {
            if *from > floor {
                break;
            }
            floor = floor.max(*to);
        }
        assert!(written.len() <= HISTORY_CHUNKS_MAX && written.keys().all(|(from, to)| from < to));
        assert!(floor == 0 || written.keys().any(|(_, to)| *to == floor));
        Ok(History {
            branch: branch.to_string(),
            written,
            floor,
        })
    }

    /// Each chunk's seqs, `from..to`, sorted by `from`.
    fn chunks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.written.keys().copied()
    }

    /// Every commit below this seq is reclaimed, its object gone or a leftover.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The entries of the reclaimed commits in `from..to` (within the floor), in seq
    /// order, each checked to follow the one before.
    pub async fn entries(
        &self,
        root: &StorageRoot,
        from: u64,
        to: u64,
    ) -> Result<Vec<HistoryEntry>> {
        let to = to.min(self.floor);
        self.relisting(root, |history| async move {
            history.entries_listed(root, from, to).await
        })
        .await
    }

    /// Runs `read` on this listing, and on a new one each time a chunk it listed is
    /// gone (a cleanup wrote a longer one that covers it, then deleted it), at most
    /// [`HISTORY_RELISTS_MAX`] times.
    async fn relisting<T, F, Fut>(&self, root: &StorageRoot, read: F) -> Result<T>
    where
        F: Fn(History) -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>>>,
    {
        let mut history = self.clone();
        for _ in 0..HISTORY_RELISTS_MAX {
            if let Some(found) = read(history).await? {
                return Ok(found);
            }
            history = History::read(root, &self.branch).await?;
            if history.floor < self.floor {
                // A floor never moves down: chunks were deleted that nothing covers.
                return Err(OmniError::corrupt(
                    layout::history_dir(&self.branch),
                    format!(
                        "the history held commits up to {}, and now only up to {}",
                        self.floor, history.floor
                    ),
                ));
            }
        }
        // Cleanups rewrote the chunks faster than this read them. Transient: a retry
        // reads them.
        Err(OmniError::ContentionExhausted {
            attempts: HISTORY_RELISTS_MAX as u32,
            evidence: omnigraph_core::Evidence::BeforeEffect,
        })
    }

    /// [`History::entries`] from the chunks as listed; `None` when one is gone.
    async fn entries_listed(
        &self,
        root: &StorageRoot,
        from: u64,
        to: u64,
    ) -> Result<Option<Vec<HistoryEntry>>> {
        let to = to.min(self.floor);
        let mut entries: Vec<HistoryEntry> = Vec::new();
        let mut next = from;
        while next < to {
            // The chunk that holds `next` and reaches furthest.
            let Some((chunk_from, chunk_to)) = self
                .chunks()
                .filter(|(start, end)| *start <= next && next < *end)
                .max_by_key(|(_, end)| *end)
            else {
                return Err(OmniError::corrupt(
                    layout::history_dir(&self.branch),
                    format!("no history chunk holds reclaimed commit {next}"),
                ));
            };
            let Some(chunk) = read_chunk(root, &self.branch, chunk_from, chunk_to).await? else {
                return Ok(None);
            };
            for entry in chunk {
                if entry.seq >= next && entry.seq < to {
                    entries.push(entry);
                }
            }
            next = chunk_to;
        }
        for pair in entries.windows(2) {
            if pair[1].parent_commit_id.as_deref() != Some(pair[0].commit_id.as_str()) {
                return Err(OmniError::corrupt(
                    layout::history_dir(&self.branch),
                    format!(
                        "reclaimed commit {} does not follow {}",
                        pair[1].seq, pair[0].seq
                    ),
                ));
            }
        }
        Ok(Some(entries))
    }

    /// The reclaimed commit with `commit_id`, if the history holds it.
    pub async fn find(&self, root: &StorageRoot, commit_id: &str) -> Result<Option<HistoryEntry>> {
        self.relisting(root, |history| async move {
            for (from, to) in history.chunks() {
                let Some(chunk) = read_chunk(root, &history.branch, from, to).await? else {
                    return Ok(None);
                };
                if let Some(found) = chunk.into_iter().find(|entry| entry.commit_id == commit_id) {
                    return Ok(Some(Some(found)));
                }
            }
            Ok(Some(None))
        })
        .await
    }

    /// The chunk that ends at the floor, when it holds fewer than
    /// [`HISTORY_CHUNK_COMMITS_MAX`] commits: the next history is written with its
    /// commits, so that frequent cleanups do not leave a chunk each.
    fn short_last_chunk(&self) -> Option<(u64, u64)> {
        self.chunks()
            .filter(|(from, to)| *to == self.floor && *from < *to)
            .min_by_key(|(from, _)| *from)
            .filter(|(from, to)| to - from < HISTORY_CHUNK_COMMITS_MAX)
    }

    /// Chunks that another chunk, written at least [`HISTORY_COVER_AGE_MIN`] ago,
    /// holds every commit of (a short chunk written again longer, or a chunk of a run
    /// that raced another).
    fn covered_chunks(&self) -> Vec<(u64, u64)> {
        let cutoff = omnigraph_core::seams::now_micros()
            .saturating_sub(HISTORY_COVER_AGE_MIN.as_micros() as i64);
        let old_enough =
            |chunk: &(u64, u64)| self.written.get(chunk).is_some_and(|at| *at < cutoff);
        self.chunks()
            .filter(|(from, to)| {
                self.chunks().any(|cover| {
                    cover != (*from, *to)
                        && cover.0 <= *from
                        && *to <= cover.1
                        && old_enough(&cover)
                })
            })
            .collect()
    }
}

/// Extends the history of `branch` (as `history` listed it) with the reclaimed commits
/// `entries`, which go on from its floor, the first on the last commit it holds: a
/// short last chunk is written again with them, and then the chunks that others
/// written long enough ago hold are deleted ([`drop_covered`], on the history listed
/// again).
pub async fn extend(
    root: &StorageRoot,
    history: &History,
    entries: Vec<HistoryEntry>,
) -> Result<()> {
    assert!(
        entries
            .first()
            .is_none_or(|first| first.seq == history.floor),
        "a history goes on from its floor"
    );
    // What the history holds up to its floor that this write needs: a short last
    // chunk's commits, to write again, or else the last commit, to go on from.
    let rewritten = history.short_last_chunk().map(|(from, _)| from);
    let from = rewritten.unwrap_or(history.floor.saturating_sub(1));
    let held = history.entries(root, from, history.floor).await?;
    // Read back from storage: checked to be the seqs up to the floor.
    let follows = held.iter().zip(from..).all(|(entry, seq)| entry.seq == seq);
    if !follows || held.len() as u64 != history.floor - from {
        return Err(OmniError::corrupt(
            layout::history_dir(&history.branch),
            format!(
                "the history does not hold every commit from {from} up to its floor {}",
                history.floor
            ),
        ));
    }
    if let (Some(last), Some(first)) = (held.last(), entries.first())
        && first.parent_commit_id.as_deref() != Some(last.commit_id.as_str())
    {
        return Err(OmniError::corrupt(
            layout::commit_path(&history.branch, first.seq),
            format!(
                "its parent is not the last commit the history holds ({})",
                last.seq
            ),
        ));
    }
    let entries = match rewritten {
        Some(_) => held.into_iter().chain(entries).collect(),
        None => entries,
    };
    write(root, &history.branch, &entries).await?;
    drop_covered(root, &History::read(root, &history.branch).await?).await
}

/// Deletes the chunks of `history` that another chunk, written at least
/// [`HISTORY_COVER_AGE_MIN`] ago, holds.
pub async fn drop_covered(root: &StorageRoot, history: &History) -> Result<()> {
    let covered = history.covered_chunks();
    let deleted: std::collections::HashSet<(u64, u64)> = covered.iter().copied().collect();
    let cutoff = omnigraph_core::seams::now_micros()
        .saturating_sub(HISTORY_COVER_AGE_MIN.as_micros() as i64);
    let old = |chunk: &(u64, u64)| history.written.get(chunk).is_some_and(|at| *at < cutoff);
    for &(from, to) in &covered {
        // What makes it safe: every commit it holds is in a chunk that stays, written
        // long enough ago that no listing misses both.
        assert!(
            history.chunks().any(|cover| cover.0 <= from
                && to <= cover.1
                && !deleted.contains(&cover)
                && old(&cover)),
            "history chunk {from}-{to} of {} is deleted only while an old chunk that stays holds it",
            history.branch
        );
        root.delete(&layout::history_chunk_path(&history.branch, from, to))
            .await?;
    }
    Ok(())
}

/// Reads and checks the chunk of `branch` holding `from..to`; `None` when it is gone.
async fn read_chunk(
    root: &StorageRoot,
    branch: &str,
    from: u64,
    to: u64,
) -> Result<Option<Vec<HistoryEntry>>> {
    let path = layout::history_chunk_path(branch, from, to);
    let Some(bytes) = root.get_capped(&path, HISTORY_CHUNK_BYTES_MAX).await? else {
        return Ok(None);
    };
    let mut text = String::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .take(HISTORY_LINES_BYTES_MAX as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|error| OmniError::corrupt(&path, format!("not a gzip of text: {error}")))?;
    if text.len() > HISTORY_LINES_BYTES_MAX {
        return Err(OmniError::corrupt(
            &path,
            format!("more than {HISTORY_LINES_BYTES_MAX} bytes of lines"),
        ));
    }
    let entries = text
        .lines()
        .zip(from..to)
        .map(|(line, seq)| {
            let entry: HistoryEntry = serde_json::from_str(line)
                .map_err(|error| OmniError::corrupt(&path, format!("line {seq}: {error}")))?;
            entry.validate(&path, seq)?;
            Ok(entry)
        })
        .collect::<Result<Vec<_>>>()?;
    if entries.len() as u64 != to - from {
        return Err(OmniError::corrupt(
            &path,
            format!("{} lines for {} commits", entries.len(), to - from),
        ));
    }
    assert!(
        entries
            .iter()
            .zip(from..to)
            .all(|(entry, seq)| entry.seq == seq)
    );
    Ok(Some(entries))
}

/// Writes the history of the reclaimed commits `entries` of `branch`, in chunks of at
/// most [`HISTORY_CHUNK_COMMITS_MAX`]; refused unless each is the commit after the one
/// before, on it (they were read from storage). A chunk is immutable and its bytes are
/// a function of its commits: one another run wrote already is the same.
async fn write(root: &StorageRoot, branch: &str, entries: &[HistoryEntry]) -> Result<()> {
    for pair in entries.windows(2) {
        if pair[1].seq != pair[0].seq + 1
            || pair[1].parent_commit_id.as_deref() != Some(pair[0].commit_id.as_str())
        {
            return Err(OmniError::corrupt(
                layout::commit_path(branch, pair[1].seq),
                format!("it does not follow commit {}", pair[0].seq),
            ));
        }
    }
    for chunk in entries.chunks(HISTORY_CHUNK_COMMITS_MAX as usize) {
        let (from, to) = (chunk[0].seq, chunk[chunk.len() - 1].seq + 1);
        let mut lines = Vec::new();
        for entry in chunk {
            serde_json::to_writer(&mut lines, entry)
                .map_err(|error| OmniError::internal(format!("a history line: {error}")))?;
            lines.push(b'\n');
        }
        // No name and no time in the gzip header: the bytes depend on the lines alone.
        let mut encoder = flate2::GzBuilder::new()
            .mtime(0)
            .write(Vec::new(), flate2::Compression::best());
        encoder
            .write_all(&lines)
            .and_then(|()| encoder.try_finish())
            .map_err(|error| OmniError::internal(format!("compressing history: {error}")))?;
        let bytes = encoder
            .finish()
            .map_err(|error| OmniError::internal(format!("compressing history: {error}")))?;
        crate::graph::put_immutable(
            root,
            &layout::history_chunk_path(branch, from, to),
            bytes.into(),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, parent: Option<&str>) -> HistoryEntry {
        HistoryEntry {
            seq,
            commit_id: format!("01J{seq:023}"),
            parent_commit_id: parent.map(str::to_string),
            created_at: 1_700_000_000_000_000 + seq as i64,
            actor: "omnigraph".into(),
            operation: CommitOperation {
                kind: "update".into(),
                summary: "Person: 1 row".into(),
            },
        }
    }

    #[tokio::test]
    async fn chunks_round_trip_make_the_floor_and_stay_small() {
        let root = StorageRoot::open(&format!(
            "memory://history-{}",
            omnigraph_core::seams::new_id().to_lowercase()
        ))
        .await
        .unwrap();
        let mut entries = vec![entry(0, None)];
        for seq in 1..25_000 {
            let parent = entries[seq as usize - 1].commit_id.clone();
            entries.push(entry(seq, Some(&parent)));
        }
        write(&root, "main", &entries).await.unwrap();
        let history = History::read(&root, "main").await.unwrap();
        assert_eq!(history.floor(), 25_000);
        assert_eq!(history.chunks().count(), 3, "chunks of at most 10,000");
        let back = history.entries(&root, 9_990, 10_020).await.unwrap();
        assert_eq!(back, entries[9_990..10_020]);
        assert_eq!(
            history.find(&root, &entries[17].commit_id).await.unwrap(),
            Some(entries[17].clone())
        );
        let bytes: u64 = root
            .list_with_meta("_graph/branches/main/history")
            .await
            .unwrap()
            .iter()
            .map(|object| object.size)
            .sum();
        assert!(bytes < 25_000 * 100, "{bytes} bytes for 25,000 commits");
        // The same chunk again is the same object; an overlapping later run extends the
        // floor.
        write(&root, "main", &entries[..10_000]).await.unwrap();
        let mut more = entries.clone();
        for seq in 25_000..25_010 {
            let parent = more[seq as usize - 1].commit_id.clone();
            more.push(entry(seq, Some(&parent)));
        }
        write(&root, "main", &more[20_000..]).await.unwrap();
        assert_eq!(History::read(&root, "main").await.unwrap().floor(), 25_010);
    }

    #[tokio::test]
    async fn frequent_short_extensions_keep_few_chunks_and_a_reader_lists_again() {
        use omnigraph_core::seams;
        let root = StorageRoot::open(&format!(
            "memory://history-{}",
            seams::new_id().to_lowercase()
        ))
        .await
        .unwrap();
        let mut entries = vec![entry(0, None)];
        for seq in 1..10_005 {
            let parent = entries[seq as usize - 1].commit_id.clone();
            entries.push(entry(seq, Some(&parent)));
        }
        let listed = || async { History::read(&root, "main").await.unwrap() };
        extend(&root, &listed().await, entries[..3].to_vec())
            .await
            .unwrap();
        let listed_early = listed().await;
        // A cleanup every few seconds: the last chunk is written again longer, and the
        // one it replaces stays while a listing may still miss the new one.
        for window in [3..7, 7..8] {
            extend(&root, &listed().await, entries[window].to_vec())
                .await
                .unwrap();
        }
        assert_eq!(
            listed().await.chunks().collect::<Vec<_>>(),
            vec![(0, 3), (0, 7), (0, 8)]
        );
        // A minute on (the memory store dates objects by the system clock: all of them
        // are a minute old on this clock), the next run deletes what is covered.
        let a_minute_on = seams::Simulation::new(
            1,
            seams::now_micros() + HISTORY_COVER_AGE_MIN.as_micros() as i64 + 1_000_000,
            0,
        );
        seams::simulate(
            a_minute_on.clone(),
            extend(&root, &listed().await, entries[8..20].to_vec()),
        )
        .await
        .unwrap();
        let folder = root.list("_graph/branches/main/history").await.unwrap();
        assert_eq!(folder, vec![layout::history_chunk_path("main", 0, 20)]);
        // A reader that listed a chunk since deleted lists again and reads the new one.
        assert_eq!(listed_early.chunks().collect::<Vec<_>>(), vec![(0, 3)]);
        assert_eq!(
            listed_early.entries(&root, 0, 3).await.unwrap(),
            entries[..3]
        );
        assert_eq!(
            listed_early
                .find(&root, &entries[2].commit_id)
                .await
                .unwrap(),
            Some(entries[2].clone())
        );
        // Past the chunk size, a full chunk stays as it is and the rest starts another.
        seams::simulate(
            a_minute_on.clone(),
            extend(&root, &listed().await, entries[20..10_003].to_vec()),
        )
        .await
        .unwrap();
        seams::simulate(
            a_minute_on.clone(),
            extend(&root, &listed().await, entries[10_003..].to_vec()),
        )
        .await
        .unwrap();
        assert_eq!(
            listed().await.chunks().collect::<Vec<_>>(),
            vec![(0, 10_000), (10_000, 10_005)]
        );
        assert_eq!(
            listed().await.entries(&root, 0, 10_005).await.unwrap(),
            entries
        );
        // A file in a subfolder named like a chunk is none: it covers nothing.
        root.put(
            "_graph/branches/main/history/copy/00000000000000000000-00000000000000010005.jsonl.gz",
            bytes::Bytes::from_static(b"x"),
        )
        .await
        .unwrap();
        seams::simulate(a_minute_on.clone(), drop_covered(&root, &listed().await))
            .await
            .unwrap();
        assert_eq!(
            listed().await.chunks().collect::<Vec<_>>(),
            vec![(0, 10_000), (10_000, 10_005)]
        );
    }
}
