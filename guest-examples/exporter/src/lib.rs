//! `exporter`: being written (issue 4).
