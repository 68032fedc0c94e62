//! Column headers to typed columns: kinds, time units, keys, and exact decimal-to-nanosecond scaling.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    TimeNs,
    Percent,
    Integer,
    Float,
    Megabytes,
    MegabytesPerS,
    Text,
}

impl Kind {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Kind::TimeNs => "time_ns",
            Kind::Percent => "percent",
            Kind::Integer => "integer",
            Kind::Float => "float",
            Kind::Megabytes => "megabytes",
            Kind::MegabytesPerS => "megabytes_per_s",
            Kind::Text => "text",
        }
    }
}

pub(super) struct ParsedCol {
    pub(super) signature: String,
    pub(super) key: String,
    pub(super) kind: Kind,
    /// (unit name, power of ten to nanoseconds)
    pub(super) unit: Option<(&'static str, u32)>,
    /// A duration or a count: a negative value is refused (a share of −1 or 2 would follow from it).
    pub(super) nonneg: bool,
}

pub(super) const TIME_UNITS: &[(&str, &str, u32)] = &[
    ("ns", "ns", 0),
    ("nsec", "ns", 0),
    ("us", "us", 3),
    ("usec", "us", 3),
    ("ms", "ms", 6),
    ("msec", "ms", 6),
    ("s", "s", 9),
    ("sec", "s", 9),
];

pub(super) fn parse_header(h: &str) -> ParsedCol {
    let h = h.trim();
    if let Some(open) = h.rfind(" (") {
        if let Some(unit) = h[open + 2..].strip_suffix(')') {
            let label = &h[..open];
            if let Some(&(_, u, p)) = TIME_UNITS.iter().find(|(n, _, _)| *n == unit) {
                return ParsedCol {
                    signature: format!("{label} (T)"),
                    key: format!("{}_ns", snake(label)),
                    kind: Kind::TimeNs,
                    unit: Some((u, p)),
                    nonneg: !TIME_POINT_COLUMNS.contains(&label),
                };
            }
            let (key, kind) = match unit {
                "%" => (format!("{}_pct", snake(label)), Kind::Percent),
                "MB" => (format!("{}_mb", snake(label)), Kind::Megabytes),
                "MB/s" => (format!("{}_mb_per_s", snake(label)), Kind::MegabytesPerS),
                _ => (snake(h), Kind::Text),
            };
            return ParsedCol { signature: h.to_string(), key, kind, unit: None, nonneg: false };
        }
    }
    let kind = if TEXT_COLUMNS.contains(&h) {
        Kind::Text
    } else if FLOAT_COLUMNS.contains(&h) {
        Kind::Float
    } else {
        Kind::Integer
    };
    ParsedCol { signature: h.to_string(), key: snake(h), kind, unit: None, nonneg: COUNT_COLUMNS.contains(&h) }
}

/// `Total Time` → `total_time`, `Reg/Trd` → `reg_per_trd`, `T-Pri` → `t_pri`.
pub(super) fn snake(label: &str) -> String {
    let label = label.replace('/', " per ");
    let mut out = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_end_matches('_').to_string()
}

impl ParsedCol {
    pub(super) fn convert(&self, cell: &str) -> std::result::Result<Value, String> {
        if cell.is_empty() {
            return Ok(Value::Null);
        }
        let int = |v: i64| -> std::result::Result<Value, String> {
            if self.nonneg && v < 0 {
                let what = if self.kind == Kind::TimeNs { "a duration" } else { "a count" };
                return Err(format!("negative: {what} cannot be below zero"));
            }
            Ok(Value::from(v))
        };
        Ok(match self.kind {
            Kind::Text => Value::String(cell.to_string()),
            Kind::TimeNs => {
                let (_, p) = self.unit.unwrap_or(("ns", 0));
                int(decimal_to_ns(cell.trim(), p).ok_or("not a decimal time, or beyond the 64-bit range of ns")?)?
            }
            Kind::Integer => {
                let t = cell.trim();
                int(t.parse::<i64>().map_err(|_| {
                    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
                    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                        "an integer beyond the 64-bit range"
                    } else {
                        "not an integer"
                    }
                })?)?
            }
            Kind::Percent | Kind::Float | Kind::Megabytes | Kind::MegabytesPerS => {
                let f: f64 = cell.trim().parse().map_err(|_| "not a number")?;
                if !f.is_finite() {
                    return Err("not a finite number".into());
                }
                Value::from(f)
            }
        })
    }
}

/// Scale decimal text by 10^pow exactly and round half away from zero: `1.2345` µs (pow 3) → 1235 ns.
pub fn decimal_to_ns(s: &str, pow: u32) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, f),
        None => (digits, ""),
    };
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let p = pow as usize;
    let mut mag: i128 = 0;
    for b in int.bytes().chain(frac.bytes().chain(std::iter::repeat(b'0')).take(p)) {
        mag = mag.checked_mul(10)?.checked_add((b - b'0') as i128)?;
    }
    if frac.len() > p && frac.as_bytes()[p] >= b'5' {
        mag += 1;
    }
    let v = if neg { -mag } else { mag };
    i64::try_from(v).ok()
}
