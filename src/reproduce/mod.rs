//! `foliolab reproduce`: every seed's tables, the seed's figures beside the model's.
//!
//! Each seed module runs its experiment in both variants on the seed's machines (the
//! model's counts, costed with the machine profiles) and returns rows in the shape of
//! the seed's own tables. A figure the model cannot produce is a row with no model
//! value and a note saying why, never a guess.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One cell pair of a seed table: the seed's figure and the model's.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    pub seed: String,
    pub experiment: String,
    pub machine: String,
    pub variant: String,
    pub unit: String,
    pub seed_value: f64,
    /// None where the model cannot produce the figure (the notes say why).
    pub model_value: Option<f64>,
    pub seed_stdev: Option<f64>,
    /// Whether the model's change against the baseline variant has the seed's sign
    /// (true for the baseline itself; false when the model has no value).
    pub sign_agrees: bool,
}

/// The modeled time of one variant, by event kind, for the stacked breakdown.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Breakdown {
    pub seed: String,
    pub experiment: String,
    pub machine: String,
    pub variant: String,
    /// Event -> modeled nanoseconds.
    pub by_event_ns: BTreeMap<String, f64>,
}

/// A curve, e.g. seed 003's map_mem time against RAM size, per variant.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Series {
    pub seed: String,
    pub name: String,
    pub x_label: String,
    pub y_label: String,
    /// `(x, y)` points in x order.
    pub points: Vec<(f64, f64)>,
}

/// Everything `reproduce` found.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Reproduction {
    pub rows: Vec<Row>,
    pub breakdowns: Vec<Breakdown>,
    pub series: Vec<Series>,
    /// Per seed, what the reader must know (refused costs, missing counters ...).
    pub notes: BTreeMap<String, Vec<String>>,
    pub elapsed_s: f64,
}
