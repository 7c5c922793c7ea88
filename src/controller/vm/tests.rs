//! Decision tests.
