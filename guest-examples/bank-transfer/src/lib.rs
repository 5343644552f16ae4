//! `bank-transfer`: being written (issue 4).
