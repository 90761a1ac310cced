#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod error;
pub mod event;
pub mod http;
pub mod json;
pub mod kafka;
#[cfg(feature = "ledger")]
pub mod ledger;
pub mod partition;
pub mod proto;
pub mod time;

pub use error::{CeError, Result};
pub use event::{AttrType, Attribute, CloudEvent, Data, dedup_key};
