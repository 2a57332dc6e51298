//! The format and the publication protocol (`docs/format.md`): where objects live, the
//! commit, the log, the exact-CAS publisher, its gate and table reservations, detached staging, cleanup's
//! retention record, the history of reclaimed commits, and creating and opening a graph. Nothing here knows the graph
//! writers of [`crate::handle`].

pub mod branches;
pub mod commit;
pub mod gate;
pub mod graph;
pub mod history;
pub mod layout;
pub mod log;
pub mod publisher;
pub mod reservation;
pub mod retention;
pub mod staging;
