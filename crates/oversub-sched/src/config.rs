//! The TOML configuration of a TimeWall system: platform, components with their buffers, and (optionally) an
//! explicit cyclic slot table.
//!
//! [`parse_system`] / [`load_system`] turn a file into a validated [`System`]; every error names the file, line
//! and column of the offending item (`demo.toml:12:1: slot 3 (B, 400-900 ms) overlaps slot 2 (A, 0-500 ms) on
//! CPU 0`). Unknown keys anywhere are errors.
//!
//! # Format
//!
//! ```toml
//! [platform]
//! capacity = "4GiB"        # required: device memory of the pool; a size string ("256MiB", "1GiB", "100MB")
//!                          # or an integer number of bytes; > 0
//! store = "/tmp"           # optional: swap store (an existing file, directory to create one in, or block
//!                          # device), or a list of them to stripe the store over (store = ["/mnt/a", "/mnt/b"]);
//!                          # default: the system temporary directory
//! device = "host"          # optional: device-memory backend; only "host" for now
//! cpus = 2                 # optional: slots may use CPUs 0..cpus; default: the available parallelism
//! gpus = 1                 # optional: slots may use GPUs 0..gpus; default 1
//!
//! [[component]]            # one per component, in declaration order
//! name = "A"               # required, unique
//! budget_ms = 500          # required: time slice per period, > 0 (fractions allowed)
//! period_ms = 1500         # required: >= budget_ms
//! cpus = [0]               # optional: CPUs it may run on, each < platform.cpus; default [0]
//! gpus = [0]               # optional: GPUs it uses, each < platform.gpus; default [] (none)
//! work = { spin_ms = 300 } # optional: per-slot work, exactly one of the built-in works spin_ms (busy loop) or
//!                          # sleep_ms (waiting on an accelerator), or wcet_ms: your own code (registered by
//!                          # name with Runtime::work or run_schedule(work=...)), planned as taking that long;
//!                          # > 0 and <= budget. Without it the component runs your code, planned at its budget,
//!                          # and running it without registered code is an error naming the component
//!
//! [[component.buffer]]     # zero or more buffers the component needs resident during its slots
//! name = "weights"         # required, unique within the component
//! size = "1GiB"            # required, > 0 (size string or integer bytes)
//! read_only = false        # optional, default false
//!
//! [schedule]               # optional; without [[schedule.slot]] entries the table is derived (see below)
//! hyperperiod_ms = 1500    # required when slots are given; for a derived table it defaults to the lcm of the
//!                          # periods (and, when given, must be a multiple of every period)
//!
//! [[schedule.slot]]        # one entry of the cyclic table, repeated every hyperperiod
//! component = "A"          # required: the name of a component
//! start_ms = 0             # required: offset in the hyperperiod, >= 0
//! length_ms = 500          # optional, > 0; default: the component's budget; must not end after the hyperperiod
//! cpu = 0                  # optional, default the component's first CPU; must be one of the component's CPUs
//! gpu = 0                  # optional, default the component's first GPU (none if it has none); must be one of
//!                          # the component's GPUs
//! ```
//!
//! Times are milliseconds (integers or floats); the model stores seconds.
//!
//! # Derived tables
//!
//! Without `[[schedule.slot]]` entries the table is derived: the hyperperiod is the least common multiple of the
//! periods, which must therefore be whole numbers of **microseconds**. Components are packed per CPU (their
//! first CPU) in declaration order: job `k` of component `c` starts at `k * period_c + offset_c`, where
//! `offset_c` is the sum of the budgets of the components declared before `c` on the same CPU; each slot is one
//! budget long and uses the component's first GPU. If a job would end after its next release, or derived slots
//! overlap (on a CPU, or on a GPU shared by components on different CPUs), the configuration is rejected: the
//! budgets do not fit and an explicit `[[schedule.slot]]` table is needed.
//!
//! # Explicit tables
//!
//! The slots are sorted by start. Slots on the same CPU, or on the same GPU, must not overlap; every component
//! needs at least one slot. The table is not otherwise checked against the budgets and periods.
//!
//! # Other rules
//!
//! The buffers of one component must fit in the pool capacity together (the system as a whole may and
//! usually does exceed it: that is oversubscription). A component without buffers is allowed.
//!
//! # Example
//!
//! Three components sharing one GPU, packed on two CPUs by the derived table:
//!
//! ```toml
//! [platform]
//! capacity = "2GiB"
//! cpus = 2
//!
//! [[component]]
//! name = "camera"
//! budget_ms = 20
//! period_ms = 100
//! gpus = [0]
//! work = { sleep_ms = 15 }
//! [[component.buffer]]
//! name = "frames"
//! size = "1GiB"
//!
//! [[component]]
//! name = "planner"
//! budget_ms = 50
//! period_ms = 100
//! [[component.buffer]]
//! name = "map"
//! size = "1.5GiB"
//! read_only = true
//!
//! [[component]]
//! name = "logger"
//! budget_ms = 10
//! period_ms = 200
//! cpus = [1]
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use oversub_base::{format_bytes, parse_size};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

use crate::model::{
    BufferSpec, Component, ComponentId, DeviceKind, Platform, Slot, System, Table, Work,
};

/// A configuration error that names where it is: `path:line:column: message` (line and column 1-based, left out
/// when unknown).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The text is not a valid configuration.
    #[error("{origin}{}: {message}", fmt_pos(.line, .column))]
    Invalid {
        /// Where the text came from (a file name).
        origin: String,
        /// 1-based line of the offending item, if known.
        line: Option<usize>,
        /// 1-based column (in characters) of the offending item, if known.
        column: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn fmt_pos(line: &Option<usize>, column: &Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(":{l}:{c}"),
        (Some(l), None) => format!(":{l}"),
        _ => String::new(),
    }
}

impl ConfigError {
    /// 1-based line of the offending item, if known.
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigError::Invalid { line, .. } => *line,
            ConfigError::Read { .. } => None,
        }
    }

    /// 1-based column of the offending item, if known.
    pub fn column(&self) -> Option<usize> {
        match self {
            ConfigError::Invalid { column, .. } => *column,
            ConfigError::Read { .. } => None,
        }
    }

    /// What is wrong, without the position (for [`ConfigError::Read`]: a fixed text; the cause is its
    /// [`source`](std::error::Error::source)).
    pub fn message(&self) -> &str {
        match self {
            ConfigError::Invalid { message, .. } => message,
            ConfigError::Read { .. } => "the configuration file could not be read",
        }
    }
}

/// Reads and validates the configuration file at `path`; messages name the file as `path` displays.
pub fn load_system(path: &Path) -> Result<System, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_system(&text, &path.display().to_string())
}

/// Parses and validates a configuration; `origin` (a file name) prefixes the error messages.
pub fn parse_system(text: &str, origin: &str) -> Result<System, ConfigError> {
    let cx = Cx { text, origin };
    let raw: RawFile =
        toml::from_str(text).map_err(|e| cx.err(e.span(), explain(text, e.span(), e.message())))?;
    cx.build(raw)
}

// ---------------------------------------------------------------------------------------------------------------
// Type errors in words.

/// The message of a TOML or serde error, with a value of the wrong type (`invalid type: string "100", expected
/// f64`) said in words that name the key, what it takes and an example (`budget_ms must be a number of
/// milliseconds, e.g. budget_ms = 100, not the string "100"`). Other messages are returned unchanged.
fn explain(text: &str, span: Option<Range<usize>>, message: &str) -> String {
    let key = span.as_ref().and_then(|s| key_at(text, s.start));
    let key_name = key.as_ref().map(|(k, _)| k.as_str());
    if message == "a path or a list of paths" {
        // The untagged `store` enum says only what it expected.
        return format!(
            "{} must be a path or a list of paths, e.g. store = \"/mnt/nvme\" or store = [\"/mnt/a\", \"/mnt/b\"]",
            key_name.unwrap_or("store")
        );
    }
    let Some(rest) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
    else {
        return message.to_string();
    };
    let Some((got, expected)) = rest.rsplit_once(", expected ") else {
        return message.to_string();
    };
    let in_list = key.as_ref().is_some_and(|(_, in_list)| *in_list);
    let (words, example) = match (expected, key_name) {
        ("f64", Some(k)) if k.ends_with("_ms") => ("a number of milliseconds", "100"),
        ("f64", _) => ("a number", "1"),
        ("usize" | "u64" | "u32", Some("cpus" | "gpus")) if !in_list => ("a whole number", "2"),
        ("usize" | "u64" | "u32", _) => ("a whole number", "0"),
        ("a sequence", _) => ("a list", "[0, 1]"),
        ("a boolean", _) => ("true or false", "true"),
        ("a string", _) => ("a string in quotes", "\"A\""),
        (e, _) if e.starts_with("a size") => {
            ("a size in quotes or a whole number of bytes", "\"256MiB\"")
        }
        (e, Some("work")) if e.contains("RawWork") => ("a table", "{ spin_ms = 300 }"),
        (e, _) if e.starts_with("struct ") => ("a table", "{ ... }"),
        _ => return message.to_string(),
    };
    let got = in_words(got);
    // A number written as a string: the example is the same number without the quotes.
    let unquoted = got
        .strip_prefix("the string \"")
        .and_then(|g| g.strip_suffix('"'))
        .filter(|g| expected == "f64" && g.trim().parse::<f64>().is_ok_and(f64::is_finite));
    let example = unquoted.map_or(example.to_string(), |g| g.trim().to_string());
    match key_name {
        Some(k) if in_list => {
            format!("the items of {k} must each be {words}, e.g. {k} = [{example}], not {got}")
        }
        Some(k) => format!("{k} must be {words}, e.g. {k} = {example}, not {got}"),
        None => format!("the value must be {words}, e.g. {example}, not {got}"),
    }
}

/// serde's description of a value (`string "100"`, ``integer `-2` ``) as a message says it.
fn in_words(got: &str) -> String {
    let ticked = |prefix: &str| {
        got.strip_prefix(prefix)
            .and_then(|v| v.strip_prefix('`'))
            .and_then(|v| v.strip_suffix('`'))
            .map(str::to_string)
    };
    if let Some(s) = got.strip_prefix("string ") {
        return format!("the string {s}");
    }
    if let Some(v) = ticked("integer ")
        .or_else(|| ticked("floating point "))
        .or_else(|| ticked("boolean "))
    {
        return v;
    }
    match got {
        "sequence" => "a list".to_string(),
        "map" => "a table".to_string(),
        other => other.to_string(),
    }
}

/// The key whose value starts at byte `offset` (the last `key =` before it on its line, quotes and dotted parts
/// taken off), and whether the value is inside a list there.
fn key_at(text: &str, offset: usize) -> Option<(String, bool)> {
    let before = text.get(..offset)?;
    let line = before.rsplit('\n').next().unwrap_or(before);
    let (lhs, value_part) = line.rsplit_once('=')?;
    let key = lhs
        .rsplit(['{', ','])
        .next()
        .unwrap_or(lhs)
        .trim()
        .rsplit('.')
        .next()?
        .trim()
        .trim_matches(|c| c == '"' || c == '\'');
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    plain.then(|| (key.to_string(), value_part.contains('[')))
}

// ---------------------------------------------------------------------------------------------------------------
// Raw (as written) form.

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "configuration")]
struct RawFile {
    platform: Spanned<RawPlatform>,
    #[serde(default)]
    component: Vec<Spanned<RawComponent>>,
    schedule: Option<Spanned<RawSchedule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "[platform] table")]
struct RawPlatform {
    capacity: Spanned<Size>,
    store: Option<Spanned<RawStore>>,
    device: Option<RawDevice>,
    cpus: Option<Spanned<usize>>,
    gpus: Option<usize>,
}

/// `store = "/path"` or `store = ["/a", "/b"]`.
#[derive(Deserialize)]
#[serde(untagged, expecting = "a path or a list of paths")]
enum RawStore {
    One(String),
    Several(Vec<String>),
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum RawDevice {
    Host,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "[[component]] table")]
struct RawComponent {
    name: Spanned<String>,
    budget_ms: Spanned<f64>,
    period_ms: Spanned<f64>,
    cpus: Option<Spanned<Vec<Spanned<usize>>>>,
    gpus: Option<Spanned<Vec<Spanned<usize>>>>,
    work: Option<Spanned<RawWork>>,
    #[serde(default)]
    buffer: Vec<Spanned<RawBuffer>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "work table")]
struct RawWork {
    spin_ms: Option<Spanned<f64>>,
    sleep_ms: Option<Spanned<f64>>,
    wcet_ms: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "[[component.buffer]] table")]
struct RawBuffer {
    name: Spanned<String>,
    size: Spanned<Size>,
    #[serde(default)]
    read_only: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "[schedule] table")]
struct RawSchedule {
    hyperperiod_ms: Option<Spanned<f64>>,
    #[serde(default)]
    slot: Vec<Spanned<RawSlot>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "[[schedule.slot]] table")]
struct RawSlot {
    component: Spanned<String>,
    start_ms: Spanned<f64>,
    length_ms: Option<Spanned<f64>>,
    cpu: Option<Spanned<usize>>,
    gpu: Option<Spanned<usize>>,
}

/// A size: a string for [`parse_size`] or an integer number of bytes.
#[derive(Clone, Copy)]
struct Size(u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"256MiB\" or \"1GiB\", or an integer number of bytes")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| {
                        E::custom(format!(
                            "size {v} is negative: give a size such as \"256MiB\" or a whole number of bytes"
                        ))
                    })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map(Size).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Validation.

/// Tolerance of time comparisons, milliseconds (1 ns).
const EPS_MS: f64 = 1e-6;
/// Most slots a derived table may have.
const MAX_DERIVED_SLOTS: u64 = 100_000;

struct Cx<'a> {
    text: &'a str,
    origin: &'a str,
}

/// A component as validated, with the spans errors about it point at.
struct Comp {
    model: Component,
    /// Budget and period, milliseconds.
    budget_ms: f64,
    period_ms: f64,
    /// The `[[component]]` header.
    header: Range<usize>,
    /// The `period_ms` value.
    period_span: Range<usize>,
}

/// A slot in milliseconds, with where it came from.
#[derive(Clone)]
struct MsSlot {
    component: ComponentId,
    start_ms: f64,
    length_ms: f64,
    cpu: usize,
    gpu: Option<usize>,
    /// Explicit table: the `[[schedule.slot]]` header and the slot's 1-based number; derived: the job index.
    origin: SlotOrigin,
}

#[derive(Clone)]
enum SlotOrigin {
    Table { header: Range<usize>, number: usize },
    Derived { job: u64 },
}

impl MsSlot {
    fn end_ms(&self) -> f64 {
        self.start_ms + self.length_ms
    }
}

/// Formats milliseconds for messages: at most 6 decimals, no trailing zeros.
fn ms(v: f64) -> String {
    let r = (v * 1e6).round() / 1e6;
    format!("{}", r + 0.0)
}

impl Cx<'_> {
    /// 1-based line and column (in characters) of a byte offset.
    fn line_col(&self, offset: usize) -> (usize, usize) {
        let off = offset.min(self.text.len());
        let before = &self.text.as_bytes()[..off];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
        let column = self
            .text
            .get(line_start..off)
            .map_or(off - line_start, |s| s.chars().count())
            + 1;
        (line, column)
    }

    fn err(&self, span: Option<Range<usize>>, message: impl Into<String>) -> ConfigError {
        let (line, column) = match span {
            Some(s) => {
                let (l, c) = self.line_col(s.start);
                (Some(l), Some(c))
            }
            None => (None, None),
        };
        ConfigError::Invalid {
            origin: self.origin.to_string(),
            line,
            column,
            message: message.into(),
        }
    }

    fn at<T>(&self, item: &Spanned<T>, message: impl Into<String>) -> ConfigError {
        self.err(Some(item.span()), message)
    }

    /// A finite time in milliseconds, > 0 (or >= 0 when `zero_ok`).
    fn time(&self, v: &Spanned<f64>, what: &str, zero_ok: bool) -> Result<f64, ConfigError> {
        let x = *v.get_ref();
        let ok = x.is_finite() && if zero_ok { x >= 0.0 } else { x > 0.0 };
        if ok {
            Ok(x + 0.0) // -0 -> 0
        } else {
            let want = if zero_ok { ">= 0" } else { "> 0" };
            Err(self.at(
                v,
                format!("{what} must be a finite number of milliseconds {want}, not {x}"),
            ))
        }
    }

    fn build(&self, raw: RawFile) -> Result<System, ConfigError> {
        let platform = self.platform(raw.platform.get_ref())?;
        if raw.component.is_empty() {
            return Err(self.err(
                None,
                "the configuration declares no component: add at least one [[component]] table",
            ));
        }
        let mut comps: Vec<Comp> = Vec::with_capacity(raw.component.len());
        let mut names: HashMap<String, usize> = HashMap::new();
        for rc in &raw.component {
            let c = self.component(rc, &platform)?;
            let name = &c.model.name;
            if let Some(&first) = names.get(name) {
                let (line, _) = self.line_col(raw.component[first].get_ref().name.span().start);
                return Err(self.at(
                    &rc.get_ref().name,
                    format!("duplicate component name {name:?} (first declared on line {line})"),
                ));
            }
            names.insert(name.clone(), comps.len());
            comps.push(c);
        }

        let schedule = raw.schedule.as_ref();
        let has_slots = schedule.is_some_and(|s| !s.get_ref().slot.is_empty());
        let (hyperperiod_ms, mut slots) = match schedule {
            Some(s) if has_slots => self.explicit(s, &comps, &names, &platform)?,
            _ => {
                let hyper = schedule.and_then(|s| s.get_ref().hyperperiod_ms.as_ref());
                self.derived(hyper, &comps)?
            }
        };

        slots.sort_by(|a, b| {
            a.start_ms
                .total_cmp(&b.start_ms)
                .then(a.cpu.cmp(&b.cpu))
                .then(a.component.cmp(&b.component))
        });
        let table = Table {
            hyperperiod_s: hyperperiod_ms / 1000.0,
            slots: slots
                .iter()
                .map(|s| Slot {
                    component: s.component,
                    start_s: s.start_ms / 1000.0,
                    length_s: s.length_ms / 1000.0,
                    cpu: s.cpu,
                    gpu: s.gpu,
                })
                .collect(),
        };
        Ok(System {
            platform,
            components: comps.into_iter().map(|c| c.model).collect(),
            table,
        })
    }

    fn platform(&self, p: &RawPlatform) -> Result<Platform, ConfigError> {
        let capacity_bytes = p.capacity.get_ref().0;
        if capacity_bytes == 0 {
            return Err(self.at(&p.capacity, "platform capacity must be > 0"));
        }
        let stores = match &p.store {
            None => Vec::new(),
            Some(s) => {
                let paths: Vec<&String> = match s.get_ref() {
                    RawStore::One(one) => vec![one],
                    RawStore::Several(several) => several.iter().collect(),
                };
                if paths.is_empty() || paths.iter().any(|p| p.is_empty()) {
                    return Err(self.at(
                        s,
                        "platform store must not be empty (leave it out for the system temporary directory)",
                    ));
                }
                paths.into_iter().map(PathBuf::from).collect()
            }
        };
        let device = match p.device {
            Some(RawDevice::Host) | None => DeviceKind::Host,
        };
        let cpus = match &p.cpus {
            Some(c) if *c.get_ref() == 0 => {
                return Err(self.at(c, "platform cpus must be > 0"));
            }
            Some(c) => *c.get_ref(),
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        Ok(Platform {
            capacity_bytes,
            stores,
            device,
            cpus,
            gpus: p.gpus.unwrap_or(1),
        })
    }

    /// Validates a list of CPU or GPU indices: non-empty (CPUs), each < `count`, no repeats.
    fn indices(
        &self,
        list: &Spanned<Vec<Spanned<usize>>>,
        kind: &str,
        count: usize,
        name: &str,
    ) -> Result<Vec<usize>, ConfigError> {
        let mut out: Vec<usize> = Vec::with_capacity(list.get_ref().len());
        for i in list.get_ref() {
            let v = *i.get_ref();
            if v >= count {
                return Err(self.at(
                    i,
                    format!("{kind} {v} of {name} does not exist: {}", have(kind, count)),
                ));
            }
            if out.contains(&v) {
                return Err(self.at(
                    i,
                    format!("{kind} {v} is listed twice in the {kind}s of {name}"),
                ));
            }
            out.push(v);
        }
        Ok(out)
    }

    fn component(
        &self,
        rc: &Spanned<RawComponent>,
        platform: &Platform,
    ) -> Result<Comp, ConfigError> {
        let c = rc.get_ref();
        let name = c.name.get_ref().clone();
        if name.is_empty() {
            return Err(self.at(&c.name, "component name must not be empty"));
        }
        let budget_ms = self.time(&c.budget_ms, &format!("budget_ms of {name}"), false)?;
        let period_ms = self.time(&c.period_ms, &format!("period_ms of {name}"), false)?;
        if budget_ms > period_ms + EPS_MS {
            return Err(self.at(
                &c.budget_ms,
                format!(
                    "budget {} ms of {name} is above its period {} ms",
                    ms(budget_ms),
                    ms(period_ms)
                ),
            ));
        }
        let cpus = match &c.cpus {
            Some(list) => {
                let v = self.indices(list, "CPU", platform.cpus, &name)?;
                if v.is_empty() {
                    return Err(self.at(list, format!("cpus of {name} must list at least one CPU")));
                }
                v
            }
            None => vec![0],
        };
        let gpus = match &c.gpus {
            Some(list) => self.indices(list, "GPU", platform.gpus, &name)?,
            None => Vec::new(),
        };
        let work = match &c.work {
            // No built-in work: the caller registers its own code for the component, planned at its whole budget.
            None => Work::User {
                wcet_s: budget_ms / 1000.0,
            },
            Some(w) => {
                let raw = w.get_ref();
                let (kind, v, work): (&str, &Spanned<f64>, fn(f64) -> Work) =
                    match (&raw.spin_ms, &raw.sleep_ms, &raw.wcet_ms) {
                        (Some(v), None, None) => ("spin", v, |s| Work::Spin { compute_s: s }),
                        (None, Some(v), None) => ("sleep", v, |s| Work::Sleep { compute_s: s }),
                        (None, None, Some(v)) => ("wcet", v, |s| Work::User { wcet_s: s }),
                        _ => {
                            return Err(self.at(
                                w,
                                format!(
                                    "work of {name} must give exactly one of spin_ms, sleep_ms (built-in works) or \
                                     wcet_ms (your own code's worst case)"
                                ),
                            ))
                        }
                    };
                let t = self.time(v, &format!("{kind}_ms of {name}"), false)?;
                if t > budget_ms + EPS_MS {
                    return Err(self.at(
                        w,
                        format!(
                            "work of {name} ({kind} {} ms) is longer than its budget {} ms",
                            ms(t),
                            ms(budget_ms)
                        ),
                    ));
                }
                work(t / 1000.0)
            }
        };
        let mut buffers: Vec<BufferSpec> = Vec::with_capacity(c.buffer.len());
        let mut total: u64 = 0;
        let mut seen: HashSet<&str> = HashSet::with_capacity(c.buffer.len());
        for rb in &c.buffer {
            let b = rb.get_ref();
            let bname = b.name.get_ref();
            if bname.is_empty() {
                return Err(self.at(&b.name, format!("buffer name of {name} must not be empty")));
            }
            if !seen.insert(bname) {
                return Err(self.at(
                    &b.name,
                    format!("duplicate buffer name {bname:?} in component {name}"),
                ));
            }
            let size = b.size.get_ref().0;
            if size == 0 {
                return Err(self.at(
                    &b.size,
                    format!("buffer {bname} of {name} has size 0; sizes must be > 0"),
                ));
            }
            total = total.saturating_add(size);
            buffers.push(BufferSpec {
                name: bname.clone(),
                size_bytes: size,
                read_only: b.read_only,
            });
        }
        if total > platform.capacity_bytes {
            return Err(self.at(
                rc,
                format!(
                    "buffers of {name} need {}, more than the pool's {} capacity",
                    format_bytes(total),
                    format_bytes(platform.capacity_bytes)
                ),
            ));
        }
        Ok(Comp {
            model: Component {
                name,
                budget_s: budget_ms / 1000.0,
                period_s: period_ms / 1000.0,
                cpus,
                gpus,
                buffers,
                work,
            },
            budget_ms,
            period_ms,
            header: rc.span(),
            period_span: c.period_ms.span(),
        })
    }

    /// The hyperperiod and slots of an explicit `[[schedule.slot]]` table.
    fn explicit(
        &self,
        sched: &Spanned<RawSchedule>,
        comps: &[Comp],
        names: &HashMap<String, usize>,
        platform: &Platform,
    ) -> Result<(f64, Vec<MsSlot>), ConfigError> {
        let s = sched.get_ref();
        let hyper_ms = match &s.hyperperiod_ms {
            Some(h) => self.time(h, "hyperperiod_ms", false)?,
            None => {
                return Err(self.at(
                    sched,
                    "[schedule] needs hyperperiod_ms when it lists [[schedule.slot]] entries",
                ))
            }
        };
        let mut slots: Vec<MsSlot> = Vec::with_capacity(s.slot.len());
        for (i, rs) in s.slot.iter().enumerate() {
            let number = i + 1;
            let r = rs.get_ref();
            let cname = r.component.get_ref();
            let Some(&cid) = names.get(cname) else {
                let known: Vec<&str> = comps.iter().map(|c| c.model.name.as_str()).collect();
                return Err(self.at(
                    &r.component,
                    format!(
                        "slot {number} names unknown component {cname:?} (components: {})",
                        known.join(", ")
                    ),
                ));
            };
            let comp = &comps[cid];
            let start_ms = self.time(&r.start_ms, &format!("start_ms of slot {number}"), true)?;
            let length_ms = match &r.length_ms {
                Some(l) => self.time(l, &format!("length_ms of slot {number}"), false)?,
                None => comp.budget_ms,
            };
            let cpu = match &r.cpu {
                Some(c) => {
                    let v = *c.get_ref();
                    if v >= platform.cpus {
                        return Err(self.at(
                            c,
                            format!(
                                "slot {number} is on CPU {v}, which does not exist: {}",
                                have("CPU", platform.cpus)
                            ),
                        ));
                    }
                    if !comp.model.cpus.contains(&v) {
                        return Err(self.at(
                            c,
                            format!(
                                "slot {number} is on CPU {v}, which is not among the CPUs of {cname} ({:?})",
                                comp.model.cpus
                            ),
                        ));
                    }
                    v
                }
                None => comp.model.cpus.first().copied().unwrap_or(0),
            };
            let gpu = match &r.gpu {
                Some(g) => {
                    let v = *g.get_ref();
                    if v >= platform.gpus {
                        return Err(self.at(
                            g,
                            format!(
                                "slot {number} uses GPU {v}, which does not exist: {}",
                                have("GPU", platform.gpus)
                            ),
                        ));
                    }
                    if !comp.model.gpus.contains(&v) {
                        return Err(self.at(
                            g,
                            format!(
                                "slot {number} uses GPU {v}, which is not among the GPUs of {cname} ({:?})",
                                comp.model.gpus
                            ),
                        ));
                    }
                    Some(v)
                }
                None => comp.model.gpus.first().copied(),
            };
            let slot = MsSlot {
                component: cid,
                start_ms,
                length_ms,
                cpu,
                gpu,
                origin: SlotOrigin::Table {
                    header: rs.span(),
                    number,
                },
            };
            if slot.end_ms() > hyper_ms + EPS_MS {
                return Err(self.at(
                    rs,
                    format!(
                        "slot {number} ({cname}, {}-{} ms) ends after the hyperperiod {} ms",
                        ms(start_ms),
                        ms(slot.end_ms()),
                        ms(hyper_ms)
                    ),
                ));
            }
            slots.push(slot);
        }
        self.check_overlaps(&slots, comps)?;
        let mut has_slot = vec![false; comps.len()];
        for s in &slots {
            if let Some(h) = has_slot.get_mut(s.component) {
                *h = true;
            }
        }
        if let Some((c, _)) = comps.iter().zip(&has_slot).find(|(_, &has)| !has) {
            return Err(self.err(
                Some(c.header.clone()),
                format!("component {} has no slot in the schedule", c.model.name),
            ));
        }
        Ok((hyper_ms, slots))
    }

    /// The hyperperiod and slots of the derived table (see the module documentation).
    fn derived(
        &self,
        hyper: Option<&Spanned<f64>>,
        comps: &[Comp],
    ) -> Result<(f64, Vec<MsSlot>), ConfigError> {
        // Periods in whole microseconds, and their lcm.
        let mut periods_us: Vec<u64> = Vec::with_capacity(comps.len());
        let mut lcm_us: u64 = 1;
        for c in comps {
            let us = whole_us(c.period_ms).ok_or_else(|| {
                self.err(
                    Some(c.period_span.clone()),
                    format!(
                        "period {} ms of {} is not a whole number of microseconds; a derived table needs \
                         that (or give an explicit [[schedule.slot]] table)",
                        ms(c.period_ms),
                        c.model.name
                    ),
                )
            })?;
            lcm_us = lcm(lcm_us, us)
                .filter(|&l| l / us <= MAX_DERIVED_SLOTS)
                .ok_or_else(|| {
                    self.err(
                        Some(c.period_span.clone()),
                        format!(
                            "the periods up to that of {} make the derived hyperperiod too long (more than \
                             {MAX_DERIVED_SLOTS} jobs per component); use harmonic periods or give an explicit \
                             [[schedule.slot]] table",
                            c.model.name
                        ),
                    )
                })?;
            periods_us.push(us);
        }
        let hyper_us = match hyper {
            None => lcm_us,
            Some(h) => {
                let v = self.time(h, "hyperperiod_ms", false)?;
                let us = whole_us(v).filter(|&us| us % lcm_us == 0);
                match us {
                    Some(us) if us / lcm_us <= MAX_DERIVED_SLOTS => us,
                    Some(_) => {
                        return Err(self.at(
                            h,
                            format!("hyperperiod {} ms is too long for a derived table", ms(v)),
                        ))
                    }
                    None => {
                        return Err(self.at(
                            h,
                            format!(
                                "hyperperiod {} ms is not a multiple of every period (their lcm is {} ms)",
                                ms(v),
                                ms(lcm_us as f64 / 1000.0)
                            ),
                        ))
                    }
                }
            }
        };
        let total_jobs: u64 = periods_us.iter().map(|&p| hyper_us / p).sum();
        if total_jobs > MAX_DERIVED_SLOTS {
            let span = hyper.map_or_else(
                || comps.last().map(|c| c.period_span.clone()),
                |h| Some(h.span()),
            );
            return Err(self.err(
                span,
                format!(
                    "the derived table would have {total_jobs} slots (more than {MAX_DERIVED_SLOTS}); use \
                     harmonic periods or give an explicit [[schedule.slot]] table"
                ),
            ));
        }
        let hyper_ms = hyper_us as f64 / 1000.0;

        let mut offsets: HashMap<usize, f64> = HashMap::new();
        let mut slots: Vec<MsSlot> = Vec::new();
        for (cid, c) in comps.iter().enumerate() {
            let cpu = c.model.cpus.first().copied().unwrap_or(0);
            let offset = offsets.entry(cpu).or_insert(0.0);
            let start = *offset;
            *offset += c.budget_ms;
            if start + c.budget_ms > c.period_ms + EPS_MS {
                return Err(self.err(
                    Some(c.header.clone()),
                    format!(
                        "the budgets on CPU {cpu} do not fit in the derived table: {} ({} ms after {} ms of \
                         earlier components) would end at {} ms, after its period {} ms; give an explicit \
                         [[schedule.slot]] table",
                        c.model.name,
                        ms(c.budget_ms),
                        ms(start),
                        ms(start + c.budget_ms),
                        ms(c.period_ms)
                    ),
                ));
            }
            let jobs = hyper_us / periods_us[cid];
            for k in 0..jobs {
                slots.push(MsSlot {
                    component: cid,
                    start_ms: k as f64 * c.period_ms + start,
                    length_ms: c.budget_ms,
                    cpu,
                    gpu: c.model.gpus.first().copied(),
                    origin: SlotOrigin::Derived { job: k },
                });
            }
        }
        self.check_overlaps(&slots, comps)?;
        Ok((hyper_ms, slots))
    }

    /// Rejects overlapping slots on one CPU or one GPU. The error points at the later-declared slot of the pair
    /// (derived tables: the later-declared component).
    fn check_overlaps(&self, slots: &[MsSlot], comps: &[Comp]) -> Result<(), ConfigError> {
        for on_gpu in [false, true] {
            let key = |s: &MsSlot| if on_gpu { s.gpu } else { Some(s.cpu) };
            let mut order: Vec<usize> = (0..slots.len())
                .filter(|&i| key(&slots[i]).is_some())
                .collect();
            order.sort_by(|&a, &b| {
                key(&slots[a])
                    .cmp(&key(&slots[b]))
                    .then(slots[a].start_ms.total_cmp(&slots[b].start_ms))
                    .then(a.cmp(&b))
            });
            // The slot with the latest end so far among those on the same resource.
            let mut active: Option<usize> = None;
            for &i in &order {
                if let Some(a) = active {
                    if key(&slots[a]) == key(&slots[i]) {
                        if slots[i].start_ms < slots[a].end_ms() - EPS_MS {
                            let (later, earlier) = if a > i { (a, i) } else { (i, a) };
                            return Err(self.overlap(
                                &slots[later],
                                &slots[earlier],
                                on_gpu,
                                comps,
                            ));
                        }
                        if slots[i].end_ms() > slots[a].end_ms() {
                            active = Some(i);
                        }
                        continue;
                    }
                }
                active = Some(i);
            }
        }
        Ok(())
    }

    fn overlap(
        &self,
        later: &MsSlot,
        earlier: &MsSlot,
        on_gpu: bool,
        comps: &[Comp],
    ) -> ConfigError {
        let resource = if on_gpu {
            format!("GPU {}", later.gpu.unwrap_or(0))
        } else {
            format!("CPU {}", later.cpu)
        };
        let name = |s: &MsSlot| {
            comps
                .get(s.component)
                .map_or("?", |c| c.model.name.as_str())
                .to_string()
        };
        let describe = |s: &MsSlot| match &s.origin {
            SlotOrigin::Table { number, .. } => format!(
                "slot {number} ({}, {}-{} ms)",
                name(s),
                ms(s.start_ms),
                ms(s.end_ms())
            ),
            SlotOrigin::Derived { job } => format!(
                "job {} of {} ({}-{} ms)",
                job + 1,
                name(s),
                ms(s.start_ms),
                ms(s.end_ms())
            ),
        };
        match &later.origin {
            SlotOrigin::Table { header, .. } => self.err(
                Some(header.clone()),
                format!("{} overlaps {} on {resource}", describe(later), describe(earlier)),
            ),
            SlotOrigin::Derived { .. } => self.err(
                comps.get(later.component).map(|c| c.header.clone()),
                format!(
                    "the budgets on {resource} do not fit in the derived table: {} overlaps {}; give an \
                     explicit [[schedule.slot]] table",
                    describe(later),
                    describe(earlier)
                ),
            ),
        }
    }
}

/// "the platform has 2 CPUs (0-1)" and the like.
fn have(kind: &str, count: usize) -> String {
    match count {
        0 => format!("the platform has no {kind}s"),
        1 => format!("the platform has 1 {kind} (0)"),
        n => format!("the platform has {n} {kind}s (0-{})", n - 1),
    }
}

/// `ms` as a whole number of microseconds (> 0), if it is one (to 1 ns).
fn whole_us(ms: f64) -> Option<u64> {
    let us = ms * 1000.0;
    let r = us.round();
    // 2^53: beyond it f64 no longer holds every integer.
    if !(1.0..=9_007_199_254_740_992.0).contains(&r) || (us - r).abs() > 1e-3 {
        return None;
    }
    Some(r as u64)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn lcm(a: u64, b: u64) -> Option<u64> {
    if a == 0 || b == 0 {
        return None;
    }
    (a / gcd(a, b)).checked_mul(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_before_their_values() {
        let at = |text: &str, value: &str| key_at(text, text.find(value).unwrap());
        assert_eq!(
            at("a = 1\nbudget_ms = \"100\"", "\"100\""),
            Some(("budget_ms".into(), false))
        );
        assert_eq!(
            at("work = { spin_ms = \"3\" }", "\"3\""),
            Some(("spin_ms".into(), false))
        );
        assert_eq!(
            at("\"budget_ms\" = \"1\"", "\"1\""),
            Some(("budget_ms".into(), false))
        );
        assert_eq!(
            at("work.spin_ms = \"x\"", "\"x\""),
            Some(("spin_ms".into(), false))
        );
        assert_eq!(
            at("cpus = [0, \"1\"]", "\"1\""),
            Some(("cpus".into(), true))
        );
        // A value on a line of its own (a list over several lines) has no key to name.
        assert_eq!(at("cpus = [\n  \"1\",\n]", "\"1\""), None);
    }

    #[test]
    fn other_messages_are_left_alone() {
        for m in [
            "missing field `platform`",
            "unknown field `x`, expected `a`",
            "invalid type: x",
        ] {
            assert_eq!(explain("k = 1", Some(4..5), m), m);
        }
        assert_eq!(
            explain(
                "\"1\"",
                Some(0..3),
                "invalid type: string \"1\", expected f64"
            ),
            "the value must be a number, e.g. 1, not the string \"1\""
        );
    }
}
