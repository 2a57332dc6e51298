//! Facts read from a Lance fragment's metadata and from row addresses, shared by the
//! adapter (which writes fragments) and a handle's caches (which only read them).

use lance::table::format::Fragment;
use std::collections::HashMap;

/// The column a scan adds for `with_row_address` (Lance's `ROW_ADDR`).
pub const ROW_ADDRESS_COLUMN: &str = "_rowaddr";

/// A row address split into its fragment id (upper 32 bits) and its offset in that
/// fragment (lower 32 bits).
pub fn split_row_address(address: u64) -> (u64, u32) {
    (address >> 32, (address & u64::from(u32::MAX)) as u32)
}

/// Whether `now` has the very files `then` has: the same id, data files, rows and row
/// ids, its deletions aside. A fragment's deletion file is all a delete or an update
/// changes in it, so a write that only lost rows there leaves this true.
pub fn same_files(then: &Fragment, now: &Fragment) -> bool {
    then.id == now.id
        && then.files == now.files
        && then.overlays == now.overlays
        && then.physical_rows == now.physical_rows
        && then.row_id_meta == now.row_id_meta
}

/// The rows `fragment` stores, deleted ones included.
pub fn stored_rows(fragment: &Fragment) -> u64 {
    fragment.physical_rows.unwrap_or(0) as u64
}

/// `fragments` by id.
pub fn by_id(fragments: &[Fragment]) -> HashMap<u64, &Fragment> {
    fragments
        .iter()
        .map(|fragment| (fragment.id, fragment))
        .collect()
}

/// The fragments of `fragments` whose ids `ids` lists, in the order `fragments` has
/// them; `None` when one of `ids` is not there.
pub fn with_ids(fragments: &[Fragment], ids: &[u64]) -> Option<Vec<Fragment>> {
    let wanted: std::collections::HashSet<u64> = ids.iter().copied().collect();
    let found: Vec<Fragment> = fragments
        .iter()
        .filter(|fragment| wanted.contains(&fragment.id))
        .cloned()
        .collect();
    (found.len() == wanted.len()).then_some(found)
}
