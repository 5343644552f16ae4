//! `document-processor`: being written (issue 4).
