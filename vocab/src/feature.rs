//! The worker protocol's features (`docs/ngw.md` §5, §15): the names a hello's `features`
//! and `NGW_HOST_FEATURES` carry, as one enum and a set, parsed and formatted here only.

use std::fmt;

/// One feature of the worker protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkerFeature {
    /// `interrupt`: the worker acts on `i` (§8).
    Interrupt,
    /// `fork`: sessions run in forked children (§5).
    Fork,
    /// `mux`: several sessions at once on one channel (§15.1).
    Mux,
    /// `notices`: `n` chunks (§15.3).
    Notices,
    /// `fds`: sessions may run on the client's own descriptors (§15.4).
    Fds,
    /// `ctty`: with `fds`, a pseudo-terminal as the command's controlling terminal (§15.7).
    Ctty,
    /// `signals`: forwarded signals, window sizes, stops and deaths by signal (§15.5).
    Signals,
    /// `stdin-window`: stdin moves in windows (§15.6).
    StdinWindow,
}

/// Every feature with its name on the wire, in the order lists are written.
const NAMES: [(WorkerFeature, &str); 8] = [
    (WorkerFeature::Interrupt, "interrupt"),
    (WorkerFeature::Fork, "fork"),
    (WorkerFeature::Mux, "mux"),
    (WorkerFeature::Notices, "notices"),
    (WorkerFeature::Fds, "fds"),
    (WorkerFeature::Ctty, "ctty"),
    (WorkerFeature::Signals, "signals"),
    (WorkerFeature::StdinWindow, "stdin-window"),
];

impl WorkerFeature {
    /// Every feature, in the order lists are written.
    pub fn all() -> impl Iterator<Item = WorkerFeature> {
        NAMES.iter().map(|&(feature, _)| feature)
    }

    /// Its name on the wire.
    pub fn name(self) -> &'static str {
        NAMES[self as usize].1
    }

    /// The feature named `name`, exactly as the wire spells it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::all().find(|f| f.name() == name)
    }

    fn bit(self) -> u16 {
        1 << self as u16
    }
}

impl fmt::Display for WorkerFeature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of worker features. Unknown names are ignored when a set is read, so a newer
/// peer's list is understood as far as it goes.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct WorkerFeatures(u16);

impl WorkerFeatures {
    /// No feature.
    pub const NONE: Self = Self(0);

    /// The set of `features`.
    pub fn of(features: &[WorkerFeature]) -> Self {
        features.iter().fold(Self::NONE, |set, &f| set.with(f))
    }

    /// Reads a comma-separated list (`NGW_HOST_FEATURES`); items are trimmed, empty and
    /// unknown ones ignored.
    pub fn parse_list(list: &str) -> Self {
        Self::from_names(list.split(',').map(str::trim))
    }

    /// Reads a list of names (a hello's `features`); unknown ones are ignored.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        names
            .into_iter()
            .filter_map(WorkerFeature::from_name)
            .fold(Self::NONE, Self::with)
    }

    /// The set with `feature` added.
    pub fn with(self, feature: WorkerFeature) -> Self {
        Self(self.0 | feature.bit())
    }

    /// Adds `feature`.
    pub fn insert(&mut self, feature: WorkerFeature) {
        *self = self.with(feature);
    }

    /// Whether `feature` is in the set.
    pub fn contains(self, feature: WorkerFeature) -> bool {
        self.0 & feature.bit() != 0
    }

    /// The features in the set, in the order of [`WorkerFeature::all`].
    pub fn iter(self) -> impl Iterator<Item = WorkerFeature> {
        WorkerFeature::all().filter(move |&f| self.contains(f))
    }

    /// The names of the features in the set, in order (a hello's `features`).
    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(WorkerFeature::name).collect()
    }

    /// The comma-separated list (`NGW_HOST_FEATURES`), in order.
    pub fn to_list(self) -> String {
        self.names().join(",")
    }
}

impl fmt::Debug for WorkerFeatures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WorkerFeatures({})", self.to_list())
    }
}

impl<'de> serde::Deserialize<'de> for WorkerFeatures {
    /// An array of strings, as a hello's `features`; anything else is an error.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        Ok(Self::from_names(names.iter().map(String::as_str)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (i, f) in WorkerFeature::all().enumerate() {
            assert_eq!(f as usize, i, "the table is in variant order");
            assert_eq!(WorkerFeature::from_name(f.name()), Some(f));
        }
        assert_eq!(WorkerFeature::from_name("MUX"), None);
    }

    #[test]
    fn lists_are_read_leniently_and_written_in_order() {
        let host = WorkerFeatures::parse_list(" stdin-window,mux,,future,notices , fds");
        assert_eq!(host.to_list(), "mux,notices,fds,stdin-window");
        assert!(host.contains(WorkerFeature::Mux));
        assert!(!host.contains(WorkerFeature::Ctty));
        assert_eq!(WorkerFeatures::parse_list(""), WorkerFeatures::NONE);
        let hello: WorkerFeatures = serde_json::from_str(r#"["fork","interrupt","x"]"#).unwrap();
        assert_eq!(hello.names(), ["interrupt", "fork"]);
        assert!(serde_json::from_str::<WorkerFeatures>("[1]").is_err());
    }
}
