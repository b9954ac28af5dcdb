//! placeholder
mod key;
mod node;
mod trie;
pub use key::TrieKey;
pub use node::Alias;
pub use trie::*;
mod reference;
pub use reference::ReferenceLpm;
