//! Table reservations (`docs/format.md` §7.7): fairness for writers that keep losing
//! their slot, carried in the log itself.
//!
//! A writer whose tables kept moving under it (a delete or a load: long to stage
//! again, so the short writers beside it win every slot it races for) publishes a
//! commit that changes no table and reserves its tables for a short lease. A
//! pin-based publication that would change a table another writer holds waits until the log
//! moves past the reservation (its holder published, which releases it) or the lease
//! ends; a publication on other tables goes on. Reservations only order writers: the
//! put-if-absent of `n+1` stays the only fence, so a writer that ignores one (an older
//! build, a skewed clock) can cost the holder a race, never a row.

use crate::commit::GraphCommit;
use crate::layout;
use crate::limits::{
    RESERVATION_POLL_MAX, RESERVATION_POLLS_MAX, RESERVATIONS_MAX, RESERVED_TABLES_MAX,
};
use crate::log::CommitLog;
use omnigraph_core::{Result, seams};
use std::time::Duration;

/// How long a reservation holds: long enough for its holder to stage a delete or a load
/// again on a slow store, short enough that a holder that died holds nobody up for long.
pub const RESERVATION_LEASE: Duration = Duration::from_secs(2);

/// One writer's claim on tables until its lease ends.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reservation {
    /// Who holds it: an id the holder minted, named again by the publication that
    /// releases it.
    pub holder: String,
    /// The tables it holds, by id.
    pub tables: Vec<String>,
    /// When the lease ends, in microseconds since the epoch, on the holder's clock.
    pub until_micros: i64,
}

impl Reservation {
    /// A new reservation of `tables` for `RESERVATION_LEASE`, held by a new id (the
    /// commit that takes it stamps the lease again from its own time).
    pub fn new(tables: Vec<String>) -> Reservation {
        assert!(!tables.is_empty(), "a reservation holds a table");
        Reservation {
            holder: seams::new_id(),
            tables,
            until_micros: seams::now_micros().saturating_add(lease_micros()),
        }
    }

    /// Whether it still holds at `now_micros`.
    pub fn holds_at(&self, now_micros: i64) -> bool {
        self.until_micros > now_micros
    }
}

fn lease_micros() -> i64 {
    crate::retention::micros_of(RESERVATION_LEASE)
}

/// The reservations a commit may carry: within the limits, each with a valid holder id
/// and valid table ids, and no table held twice.
pub(crate) fn validate(reservations: &[Reservation]) -> std::result::Result<(), String> {
    if reservations.len() > RESERVATIONS_MAX {
        return Err(format!(
            "it carries {} reservations; the limit is {RESERVATIONS_MAX}",
            reservations.len()
        ));
    }
    let tables: usize = reservations.iter().map(|r| r.tables.len()).sum();
    if tables > RESERVED_TABLES_MAX {
        return Err(format!(
            "its reservations hold {tables} tables; the limit is {RESERVED_TABLES_MAX}"
        ));
    }
    let mut held = std::collections::HashSet::new();
    for reservation in reservations {
        crate::commit::check_id("reservations.holder", &reservation.holder)?;
        if reservation.tables.is_empty() {
            return Err(format!("reservation {} holds no table", reservation.holder));
        }
        for table_id in &reservation.tables {
            layout::check_table_id(table_id)?;
            if !held.insert(table_id.as_str()) {
                return Err(format!("table {table_id} is reserved twice"));
            }
        }
    }
    Ok(())
}

/// The reservation of another writer that holds one of `tables` on `base` at
/// `now_micros`, if any: `holding` is the writer's own, and `waited_out` those it
/// already waited a whole lease for (their holders' clocks may run ahead of its own).
pub(crate) fn blocking<'a>(
    base: &'a GraphCommit,
    tables: &[&str],
    holding: Option<&str>,
    waited_out: &[String],
    now_micros: i64,
) -> Option<&'a Reservation> {
    base.reservations.iter().find(|reservation| {
        Some(reservation.holder.as_str()) != holding
            && !waited_out.contains(&reservation.holder)
            && reservation.holds_at(now_micros)
            && reservation
                .tables
                .iter()
                .any(|table| tables.contains(&table.as_str()))
    })
}

/// The reservations the commit after `base`, created at `created_micros`, carries: the
/// base's that still hold, but for the one its publication releases (`holding`) and
/// those it waited out; then `reserving`, when room is left and no table of it is
/// still held by another.
pub(crate) fn carried(
    base: &GraphCommit,
    holding: Option<&str>,
    waited_out: &[String],
    reserving: Option<&Reservation>,
    created_micros: i64,
) -> Vec<Reservation> {
    // A lease stamped on a clock ahead of this one is cut to one lease from here: a
    // dead holder whose clock ran fast holds nobody up for longer than that, since every
    // commit after this one carries it at most that far.
    let lease_ends_by = created_micros.saturating_add(lease_micros());
    let mut carried: Vec<Reservation> = base
        .reservations
        .iter()
        .filter(|reservation| {
            Some(reservation.holder.as_str()) != holding
                && !waited_out.contains(&reservation.holder)
                && reservation.holds_at(created_micros)
        })
        .map(|reservation| Reservation {
            until_micros: reservation.until_micros.min(lease_ends_by),
            ..reservation.clone()
        })
        .collect();
    if let Some(new) = reserving {
        // The lease runs from the commit that takes it: a reservation that first waited
        // for another's lands with all of it.
        let new = Reservation {
            until_micros: lease_ends_by,
            ..new.clone()
        };
        let held: usize = carried.iter().map(|r| r.tables.len()).sum();
        let free = !carried
            .iter()
            .any(|r| r.tables.iter().any(|table| new.tables.contains(table)));
        if free
            && carried.len() < RESERVATIONS_MAX
            && held + new.tables.len() <= RESERVED_TABLES_MAX
        {
            carried.push(new);
        }
    }
    carried
}

/// Waits, reading the log, until commit `base.seq + 1` appears (returned) or the lease
/// of `reservation` ends, as this writer's clock reads it and at most
/// [`RESERVATION_LEASE`] from `waiting_since_micros` (then `None`). `polls` counts the
/// reads across the publication's waits, up to [`RESERVATION_POLLS_MAX`].
pub(crate) async fn await_next(
    log: &CommitLog,
    base: &GraphCommit,
    reservation: &Reservation,
    waiting_since_micros: i64,
    polls: &mut u32,
) -> Result<Option<GraphCommit>> {
    let ends = reservation
        .until_micros
        .min(waiting_since_micros.saturating_add(lease_micros()));
    let mut interval = Duration::from_millis(2);
    while *polls < RESERVATION_POLLS_MAX {
        *polls += 1;
        if let Some(next) = log.read(base.seq + 1).await? {
            return Ok(Some(next));
        }
        // In a deterministic simulation one actor steps at a time: the holder cannot
        // publish while this writer waits, so it waits no longer than one read.
        if seams::now_micros() >= ends || seams::in_simulation() {
            return Ok(None);
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(RESERVATION_POLL_MAX);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(tables: &[&str], until_micros: i64) -> Reservation {
        Reservation {
            holder: seams::new_id(),
            tables: tables.iter().map(|t| t.to_string()).collect(),
            until_micros,
        }
    }

    #[test]
    fn a_reservation_blocks_only_others_on_its_tables_while_it_holds() {
        let mut base = crate::commit::test_commit("main", 3);
        let other = held(&["ta", "tb"], 1_000);
        base.reservations = vec![other.clone()];
        assert_eq!(blocking(&base, &["tb"], None, &[], 999), Some(&other));
        assert_eq!(
            blocking(&base, &["tc"], None, &[], 999),
            None,
            "other tables"
        );
        assert_eq!(
            blocking(&base, &["ta"], None, &[], 1_000),
            None,
            "lease ended"
        );
        assert_eq!(
            blocking(&base, &["ta"], Some(&other.holder), &[], 0),
            None,
            "its own holder"
        );
        assert_eq!(
            blocking(&base, &["ta"], None, std::slice::from_ref(&other.holder), 0),
            None,
            "waited out"
        );
    }

    #[test]
    fn a_commit_carries_what_still_holds_and_never_reserves_a_table_twice() {
        let mut base = crate::commit::test_commit("main", 3);
        let ended = held(&["ta"], 10);
        let holding = held(&["tb"], 1_000);
        let mine = held(&["tc"], 1_000);
        base.reservations = vec![ended, holding.clone(), mine.clone()];
        let carried_on = carried(&base, Some(&mine.holder), &[], None, 500);
        assert_eq!(carried_on, vec![holding.clone()], "ended and released go");
        let clash = held(&["tb", "td"], 2_000);
        assert_eq!(
            carried(&base, None, &[], Some(&clash), 500).len(),
            2,
            "tb is held: the clash is not added"
        );
        let free = held(&["ta", "td"], 2_000);
        let with_free = carried(&base, Some(&mine.holder), &[], Some(&free), 500);
        let stamped = Reservation {
            until_micros: 500 + lease_micros(),
            ..free
        };
        assert_eq!(
            with_free,
            vec![holding, stamped],
            "its lease runs from the commit"
        );
        assert!(validate(&with_free).is_ok());
    }

    /// A holder whose clock ran far ahead stamped a lease far in the future: the first
    /// commit that carries it cuts it to one lease on its own clock, and a commit one
    /// lease later drops it. (It was carried unchanged for as long as the clocks
    /// differed.)
    #[test]
    fn a_lease_stamped_on_a_fast_clock_is_carried_one_lease_at_most() {
        let mut base = crate::commit::test_commit("main", 3);
        base.reservations = vec![held(&["ta"], 500 + 1_000 * lease_micros())];
        let once = carried(&base, None, &[], None, 500);
        assert_eq!(once.len(), 1);
        assert_eq!(once[0].until_micros, 500 + lease_micros());
        base.reservations = once;
        assert!(carried(&base, None, &[], None, 500 + lease_micros()).is_empty());
        // A lease within one lease of the carrier's clock is kept as stamped.
        base.reservations = vec![held(&["ta"], 900)];
        assert_eq!(carried(&base, None, &[], None, 500)[0].until_micros, 900);
    }

    #[test]
    fn a_read_refuses_reservations_past_their_limits() {
        let twice = vec![held(&["ta"], 1), held(&["ta"], 2)];
        assert!(validate(&twice).unwrap_err().contains("reserved twice"));
        assert!(validate(&[held(&[], 1)]).unwrap_err().contains("no table"));
        let mut bad_holder = held(&["ta"], 1);
        bad_holder.holder = "no/slash".into();
        assert!(validate(&[bad_holder]).is_err());
        let many: Vec<Reservation> = (0..=RESERVATIONS_MAX)
            .map(|i| held(&[&format!("t{i}")], 1))
            .collect();
        assert!(validate(&many).unwrap_err().contains("reservations"));
    }
}
