//! The in-memory cluster and cloud of a replay (not implemented yet).
