//! `link-inversion`: being written (issue 4).
