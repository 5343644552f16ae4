//! `word-count`: being written (issue 4).
