//! `clustering`: being written (issue 4).
