//! Contention-aware swap space management simulator (being written).
