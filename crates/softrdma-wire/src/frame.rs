//! Whole-frame decoding (in progress).
