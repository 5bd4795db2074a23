//! ngd library.
