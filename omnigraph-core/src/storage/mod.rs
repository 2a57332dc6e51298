//! The storage root and the object-store wrapper every request in it passes through.

mod root;
mod wrapper;

pub use root::{ObjectInfo, PutOutcome, ROOT_URI_LEN_MAX, RootLocation, StorageRoot};
pub use wrapper::{
    FaultAction, FaultHandle, FaultRule, Request, RequestCounts, RequestKind, RequestProbe,
};
