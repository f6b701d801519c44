//! The family trait the lane host drives (from `tf-family`), and the dsv41 loader the server starts with.

pub use tf_dsv41::family::load_dsv41;
pub use tf_family::Family;
