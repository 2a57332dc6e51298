//! The project's own pins of the Lance 14 behaviours the design relies on or must avoid.
//! If a Lance upgrade changes one of these, a test here fails before anything else does.

mod cleanup_hazard;
mod detached;
mod indexes;
