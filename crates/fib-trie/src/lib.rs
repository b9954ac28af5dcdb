//! placeholder
mod fib;
mod key;
mod node;
mod reference;
mod route;
mod table;
mod trie;

pub use fib::{Fib, FibRule, RuleAction, RuleError};
pub use key::TrieKey;
pub use node::Alias;
pub use reference::ReferenceLpm;
pub use route::{
    FibAlias, InsertFlags, NextHop, NextHopFlags, Route, RouteError, RouteInfo, RouteSelector,
    RouteType, Scope,
};
pub use table::{FibResult, FibTable, Flow, LookupError, TableLookup, ids};
pub use trie::{
    BATCH, HALVE_THRESHOLD, HALVE_THRESHOLD_ROOT, INFLATE_THRESHOLD, INFLATE_THRESHOLD_ROOT,
    LcTrie, MAX_WORK, Match, PrefixError, check_prefix,
};
